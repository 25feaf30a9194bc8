namespace Herald.Broker.Compression;

/// <summary>
/// One topic's delta state (spec §11.2), shared by its delta subscriptions on this node: the previous publication's
/// payload (the base of the next delta) and sequence, and what deltas have been saving on it. Made by
/// <see cref="DeltaEncoder.Enroll"/>, dropped with its last subscription; guarded by its own lock.
/// </summary>
internal sealed class TopicDelta
{
    public TopicDelta(DeltaEncoder owner, string topic)
    {
        Owner = owner;
        Topic = topic;
    }

    public DeltaEncoder Owner { get; }

    public string Topic { get; }

    /// <summary>Delta subscriptions on this topic (guarded by the owner's enrolment lock).</summary>
    public int Subscribers { get; set; }

    /// <summary>The previous publication's payload, <see cref="Length"/> bytes of it; null when none is kept.</summary>
    public byte[]? Previous { get; set; }

    public int Length { get; set; }

    /// <summary>The previous publication's sequence (node-wide, <see cref="Delivery.MessageBuffer.DeltaSequence"/>); 0: none.</summary>
    public long Sequence { get; set; }

    /// <summary>Exponential average of delta/original size over the deltas computed.</summary>
    public double Ratio { get; set; }

    public int Samples { get; set; }

    /// <summary>Publications since the last probe, while switched off.</summary>
    public int SinceProbe { get; set; }

    /// <summary>Ends one delta subscription on the topic.</summary>
    public void Leave() => Owner.Leave(this);
}
