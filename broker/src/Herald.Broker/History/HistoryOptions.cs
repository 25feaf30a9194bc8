using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.History;

/// <summary>
/// Topic history (spec §13): which topics keep their recent messages so that a client can resume after a
/// disconnect, and how much memory all of it may hold. Off unless <see cref="Topics"/> names a pattern.
/// </summary>
public sealed class HistoryOptions
{
    /// <summary>The patterns whose topics keep a history, each with its bounds; the first that matches a topic rules it.</summary>
    public List<HistoryRule> Topics { get; set; } = [];

    /// <summary>
    /// Most topics holding a history at once. A new one beyond it evicts the least recently published (its
    /// history is lost: a client resuming it is told so).
    /// </summary>
    [Range(1, 10_000_000)]
    public int MaxTopics { get; set; } = 10_000;

    /// <summary>
    /// Bytes all histories together may hold (the pooled buffers of their messages). Over it, the topic being
    /// published drops its oldest messages first, then the least recently published topics drop theirs.
    /// </summary>
    [Range(1024, long.MaxValue)]
    public long MaxBytes { get; set; } = 64L * 1024 * 1024;

    /// <summary>Whether any topic keeps a history.</summary>
    public bool Enabled => Topics.Count > 0;
}

/// <summary>One pattern's history bounds: a message is kept until either bound passes it.</summary>
public sealed class HistoryRule
{
    /// <summary>A topic pattern (wildcards allowed); each topic it matches has its own history.</summary>
    [Required]
    public string Pattern { get; set; } = "";

    /// <summary>Most messages one topic keeps.</summary>
    [Range(1, 1_000_000)]
    public int MaxMessages { get; set; } = 1000;

    /// <summary>How long a message is kept.</summary>
    public TimeSpan MaxAge { get; set; } = TimeSpan.FromMinutes(5);

    /// <summary>
    /// Most bytes one topic keeps (each kept message's MESSAGE plus <see cref="TopicHistory.EntryOverhead"/>; in a cluster,
    /// in Redis, each kept envelope): past it the oldest go, the newest message always stays. The default is the default
    /// <c>Limits:MaxPendingBytes</c>, so a default connection can be sent a whole history.
    /// </summary>
    [Range(1024, long.MaxValue)]
    public long MaxBytes { get; set; } = 8L * 1024 * 1024;
}
