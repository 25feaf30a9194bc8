using Herald.Broker.Security;

namespace Herald.Broker.Engines;

/// <summary>What the server API does to clients (spec §8 <c>Disconnected</c>, <c>Revoked</c>, <c>Unsubscribed</c>; §4.10).</summary>
internal enum ClientActionKind
{
    /// <summary>End one client (<see cref="ClientAction.Client"/>) or every client of an identity, telling each the reason.</summary>
    Disconnect,

    /// <summary>Refuse an identity until a time, and end every client it holds now.</summary>
    Revoke,

    /// <summary>Lift an identity's revocation.</summary>
    Unrevoke,

    /// <summary>Subscribe one connected client to a pattern; the client is told (SUBSCRIBED, spec §4.10).</summary>
    Subscribe,

    /// <summary>End one client's subscriptions to a pattern; the client is told (a non-fatal <c>Unsubscribed</c> ERROR per sid).</summary>
    Unsubscribe,
}

/// <summary>
/// One action of the server API on clients. A client is named by its client id (spec §15.1: unique in the cluster, the
/// node's id first), an identity by its name (a static token's name, a JWT's <c>sub</c>).
/// </summary>
internal sealed record ClientAction(ClientActionKind Kind)
{
    /// <summary>The most characters of a reason a client is told or a revocation keeps; the rest is cut (the server API refuses longer ones first).</summary>
    public const int MaxReasonLength = 512;

    /// <summary><see cref="Reason"/> within <see cref="MaxReasonLength"/>, or <paramref name="otherwise"/> when none was given.</summary>
    public string ReasonOr(string otherwise) => Reason.Length == 0 ? otherwise : Reason.Length > MaxReasonLength ? Reason[..MaxReasonLength] : Reason;

    /// <summary>The client acted on (Disconnect, Subscribe, Unsubscribe); null with <see cref="Identity"/>: every client of it.</summary>
    public string? Client { get; init; }

    /// <summary>The identity acted on (Disconnect, Revoke, Unrevoke).</summary>
    public string? Identity { get; init; }

    /// <summary>What the client is told (Disconnect, Revoke, Unsubscribe), as the backend wrote it.</summary>
    public string Reason { get; init; } = "";

    /// <summary>Revoke: refused until then.</summary>
    public DateTimeOffset Until { get; init; }

    /// <summary>Subscribe, Unsubscribe: the pattern (Unsubscribe: every subscription of the client with exactly this pattern).</summary>
    public string? Pattern { get; init; }

    /// <summary>Subscribe: SUBSCRIBE's option bits (spec §4.3: no echo; join and presence events need the presence capability).</summary>
    public uint Options { get; init; }

    /// <summary>Subscribe: skip the client's own subscribe permissions (the backend decided); limits hold all the same.</summary>
    public bool Force { get; init; }
}

/// <summary>
/// What an action did: the clients it reached (ended, subscribed, unsubscribed), the nodes that answered of those asked, the
/// sid a Subscribe made, or why it was refused (<see cref="Code"/>: a spec §8 name or <c>NotSupported</c>, with a message).
/// </summary>
internal readonly record struct ClientActionOutcome(int Clients, int Nodes = 1, int NodesAsked = 1, uint Sid = 0, string? Code = null, string? Message = null)
{
    public static readonly ClientActionOutcome None = new(0);

    /// <summary>Two nodes' answers as one: clients and nodes added up, the first sid and refusal kept.</summary>
    public ClientActionOutcome Plus(ClientActionOutcome other) =>
        new(Clients + other.Clients, Nodes + other.Nodes, NodesAsked, Sid != 0 ? Sid : other.Sid, Code ?? other.Code, Message ?? other.Message);
}

/// <summary>
/// The seam the server API's actions on clients enter through: an action reaches the node that holds the client (every
/// node, for an identity's clients), and revocations hold on every node, including one that starts later. The local
/// default acts on this node only; the cluster's broadcasts the action on a control channel and keeps revocations in Redis.
/// </summary>
internal interface IClientControl
{
    /// <summary>The revocations in force on this node, looked up when a client authenticates.</summary>
    Revocations Revocations { get; }

    /// <summary>This node's part of every action: its sessions (called once, by the session registry, before any action).</summary>
    void Serve(Func<ClientAction, Task<ClientActionOutcome>> here);

    /// <summary>
    /// Carries <paramref name="action"/> out where it must be: a Revoke is recorded first (refused with <c>TooManyRevocations</c>
    /// past the bound), then every node ends what it holds. Raises <see cref="ClusterUnavailableException"/> when the cluster
    /// cannot be reached.
    /// </summary>
    Task<ClientActionOutcome> RunAsync(ClientAction action, CancellationToken cancellationToken);
}

/// <summary>One node: the action is carried out here, revocations kept in memory.</summary>
internal sealed class LocalClientControl(Revocations revocations) : IClientControl
{
    private Func<ClientAction, Task<ClientActionOutcome>>? _here;

    public Revocations Revocations => revocations;

    public void Serve(Func<ClientAction, Task<ClientActionOutcome>> here) => _here = here;

    public Task<ClientActionOutcome> RunAsync(ClientAction action, CancellationToken cancellationToken)
    {
        if (ClientControlRules.Record(revocations, action) is { } refused)
        {
            return Task.FromResult(refused);
        }

        return _here?.Invoke(action) ?? Task.FromResult(ClientActionOutcome.None);
    }
}

/// <summary>What every implementation does the same way before the nodes act.</summary>
internal static class ClientControlRules
{
    /// <summary>The refusal of a revocation past the bound (<c>Herald:Security:MaxRevocations</c>).</summary>
    public static ClientActionOutcome Full(int max) =>
        new(0, Code: "TooManyRevocations", Message: $"The broker holds its maximum of {max} revocations (Herald:Security:MaxRevocations); lift one, or wait for one to end.");

    /// <summary>Records a Revoke or an Unrevoke in <paramref name="revocations"/>; the refusal when the table is full, else null.</summary>
    public static ClientActionOutcome? Record(Revocations revocations, ClientAction action)
    {
        switch (action.Kind)
        {
            case ClientActionKind.Revoke when !revocations.Set(new Revocation(action.Identity!, action.Until, action.ReasonOr(""))):
                return Full(revocations.Max);
            case ClientActionKind.Unrevoke:
                revocations.Remove(action.Identity!);
                return null;
            default:
                return null;
        }
    }
}
