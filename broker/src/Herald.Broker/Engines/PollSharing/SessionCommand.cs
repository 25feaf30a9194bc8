namespace Herald.Broker.Engines.PollSharing;

/// <summary>A request for a session, sent to its owner (spec cluster.md §10).</summary>
internal sealed class SessionCommand
{
    public long Id { get; set; }

    public string From { get; set; } = "";

    /// <summary>Unique to this command: its owner carries out a nonce once (a replay is refused).</summary>
    public string? Nonce { get; set; }

    /// <summary>The sender's deadline (Unix ms, a little before it stops waiting): past it, the owner does not carry the command out.</summary>
    public long Deadline { get; set; }

    public string Token { get; set; } = "";

    /// <summary>subscribe, unsubscribe, publish, end.</summary>
    public string Op { get; set; } = "";

    public uint Sid { get; set; }

    public string? Pattern { get; set; }

    public bool NoEcho { get; set; }

    public ulong? SinceOffset { get; set; }

    public string? SinceEpoch { get; set; }

    /// <summary>Subscribe: the queue group to join (spec §14), or null.</summary>
    public string? Queue { get; set; }

    /// <summary>Subscribe: be present on the topic (spec §15.1).</summary>
    public bool Join { get; set; }

    /// <summary>Subscribe: receive the topic's join and leave events (spec §15.2).</summary>
    public bool PresenceEvents { get; set; }

    /// <summary>Subscribe: ask for deltas (spec §11.2; a session granted them).</summary>
    public bool Delta { get; set; }

    /// <summary>publish: the PUBLISH frames.</summary>
    public byte[]? Frames { get; set; }
}

/// <summary>The owner's answer: the HTTP status, and for a problem its code, message and reason; or a notice.</summary>
internal sealed class SessionReply
{
    public long Id { get; set; }

    public int Status { get; set; }

    public string? Code { get; set; }

    public string? Message { get; set; }

    public string? Reason { get; set; }

    public int? RetryAfter { get; set; }

    public string? Notice { get; set; }
}
