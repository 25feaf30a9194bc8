using System.ComponentModel.DataAnnotations;
using Herald.Broker.Delivery;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>The HTTP long-poll transport's knobs (protocol-spec/longpoll.md §3), after WCF's polling duplex.</summary>
public sealed class LongPollOptions
{
    /// <summary>How long a poll is held when no message is waiting (WCF serverPollTimeout).</summary>
    public TimeSpan PollTimeout { get; set; } = TimeSpan.FromSeconds(15);

    /// <summary>A session without any request (and no poll held) for this long ends, with its subscriptions.</summary>
    public TimeSpan InactivityTimeout { get; set; } = TimeSpan.FromSeconds(60);

    /// <summary>Most sessions alive at once.</summary>
    [Range(1, 10_000_000)]
    public int MaxSessions { get; set; } = 100_000;

    /// <summary>Most session creations in progress at once (WCF maxPendingSessions).</summary>
    [Range(1, 1_000_000)]
    public int MaxPendingSessions { get; set; } = 1_000;

    /// <summary>Unacknowledged messages a session may hold before its slow-consumer policy acts (WCF maxPendingMessagesPerSession).</summary>
    [Range(1, 10_000_000)]
    public int MaxPendingMessagesPerSession { get; set; } = 10_000;

    /// <summary><c>Disconnect</c> ends the session; <c>DropOldest</c> drops the oldest and reports the gap.</summary>
    public SlowConsumerPolicy SlowConsumerPolicy { get; set; } = SlowConsumerPolicy.Disconnect;

    /// <summary>Most messages in one poll response.</summary>
    [Range(1, 1_000_000)]
    public int MaxMessagesPerPoll { get; set; } = 1_000;

    /// <summary>Most bytes in one poll response (at least one message is always sent).</summary>
    [Range(1024, int.MaxValue)]
    public int MaxBytesPerPoll { get; set; } = 1024 * 1024;

    /// <summary>Most polls held at once, over all sessions.</summary>
    [Range(1, 10_000_000)]
    public int MaxConcurrentPolls { get; set; } = 100_000;

    /// <summary>Largest request body (publish payloads, JSON), bytes.</summary>
    [Range(64, 64 * 1024 * 1024)]
    public int MaxBodyBytes { get; set; } = 1024 * 1024;

    /// <summary>Most bytes the Zstd payloads of one frames body may decompress to, together (checked from their headers first).</summary>
    [Range(1024, int.MaxValue)]
    public int MaxDecompressedBytesPerBody { get; set; } = 8 * 1024 * 1024;

    /// <summary>Most session creations and publishes in progress at once from one remote address (0: no limit).</summary>
    [Range(0, 1_000_000)]
    public int MaxPendingRequestsPerAddress { get; set; } = 16;

    /// <summary>Unacknowledged bytes all long-poll sessions may hold together; over it new sessions are refused and the largest backlogs meet their slow-consumer policy.</summary>
    [Range(1024, long.MaxValue)]
    public long MaxPendingBytesTotal { get; set; } = 256L * 1024 * 1024;

    /// <summary>Ended session tokens remembered (answered 410 with the reason); the oldest is forgotten first.</summary>
    [Range(0, 10_000_000)]
    public int MaxEndedSessions { get; set; } = 10_000;

    /// <summary>How long an ended session token is answered 410 before it is forgotten (then 404).</summary>
    public TimeSpan EndedSessionMemory { get; set; } = TimeSpan.FromMinutes(10);
}
