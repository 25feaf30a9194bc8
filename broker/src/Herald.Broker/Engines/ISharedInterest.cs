namespace Herald.Broker.Engines;

/// <summary>
/// The subscriptions of this node's clients, as the other nodes must know them before a client is told its
/// subscription is live (the transport answers its next PING or long-poll request after <see cref="WhenSettledAsync"/>).
/// The local implementation, the default, is always settled; the cluster's settles once Redis has every change.
/// </summary>
internal interface ISharedInterest
{
    /// <summary>Whether every subscription change made so far is known where it must be. Any thread; no allocation.</summary>
    bool IsSettled { get; }

    /// <summary>Completes when every subscription change made before this call is known where it must be.</summary>
    Task WhenSettledAsync();
}

/// <summary>One node: a subscription is live everywhere once the router has it.</summary>
internal sealed class LocalInterest : ISharedInterest
{
    public static readonly LocalInterest Instance = new();

    public bool IsSettled => true;

    public Task WhenSettledAsync() => Task.CompletedTask;
}
