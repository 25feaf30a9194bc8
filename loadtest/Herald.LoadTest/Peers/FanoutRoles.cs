using Herald.LoadTest.Scenarios;

namespace Herald.LoadTest.Peers;

/// <summary>What the fanout scenario needs from one subscriber, whichever broker it talks to.</summary>
internal interface IFanoutSubscriber
{
    long Received { get; }

    long BytesReceived { get; }

    bool Closed { get; }

    string? LostReason { get; }

    long Missed { get; }

    long Reordered { get; }

    long AnnouncedDropped { get; }

    long ErrorFrames { get; }

    long Unexpected { get; }

    Task RunAsync(RunState state);
}

/// <summary>What the fanout scenario needs from the publisher, whichever broker it talks to.</summary>
internal interface IFanoutPublisher
{
    long Published { get; }

    long Sent { get; }

    long BytesSent { get; }

    long FlowWaits { get; }

    long ErrorFrames { get; }

    long Unexpected { get; }

    string? Failure { get; }

    Task PublishAsync(RunState state, CancellationToken stop);

    Task ReadAsync(RunState state);
}
