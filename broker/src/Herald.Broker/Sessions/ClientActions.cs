using System.Globalization;
using Herald.Broker.Engines;
using Herald.Broker.Security;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Sessions;

/// <summary>
/// This node's part of the server API's actions on clients (<see cref="IClientControl"/> calls it for every action that
/// reaches the node): finds the sessions named, by client id or by identity, on every transport, and acts on each through
/// the session itself, so each transport tells its client in its own medium (a fatal ERROR, an SSE error event, a long-poll
/// session's 410; SUBSCRIBED and the non-fatal <c>Unsubscribed</c> ERROR on framed transports). An identity's sessions are
/// found by a scan of this node's sessions: an admin action, never on a client's path.
/// </summary>
internal sealed class ClientActions(BrokerCore broker, SessionRegistry registry)
{
    public async Task<ClientActionOutcome> ApplyAsync(ClientAction action)
    {
        ClientActionOutcome outcome = action.Kind switch
        {
            ClientActionKind.Disconnect => End(action, ErrorCode.Disconnected, action.ReasonOr("Disconnected by the application.")),
            ClientActionKind.Revoke => End(action, ErrorCode.Revoked, new Revocation(action.Identity!, action.Until, action.ReasonOr("")).Message),
            ClientActionKind.Subscribe => Find(action.Client) is { } session ? await session.SubscribeFromServerAsync(action.Pattern!, (SubscribeOptions)action.Options, action.Force).ConfigureAwait(false) : ClientActionOutcome.None,
            ClientActionKind.Unsubscribe => Find(action.Client) is { } session ? session.UnsubscribeFromServer(action.Pattern!, action.ReasonOr("Unsubscribed by the application.")) : ClientActionOutcome.None,
            _ => ClientActionOutcome.None,
        };

        if (outcome.Clients > 0)
        {
            broker.Log.ClientActionApplied(action.Kind.ToString(), outcome.Clients, action.Client, action.Identity);
        }

        return outcome;
    }

    /// <summary>Ends the client named, or every open client of the identity named, with <paramref name="code"/> and <paramref name="message"/>.</summary>
    private ClientActionOutcome End(ClientAction action, ErrorCode code, string message)
    {
        if (action.Client is not null)
        {
            return Find(action.Client) is { } session && session.Close(code, message) ? new ClientActionOutcome(1) : ClientActionOutcome.None;
        }

        int ended = 0;
        foreach (ProtocolSession session in registry.Sessions)
        {
            if (session.IsOpen && session.Identity.Name == action.Identity && session.Close(code, message))
            {
                ended++;
            }
        }

        return new ClientActionOutcome(ended);
    }

    /// <summary>The session whose client id (spec §15.1, <see cref="ProtocolSession.PresenceClient"/>) is <paramref name="client"/>, if this node holds it.</summary>
    private ProtocolSession? Find(string? client)
    {
        string prefix = broker.Presence.ClientPrefix;
        if (client is null || client.Length != prefix.Length + 16 || !client.StartsWith(prefix, StringComparison.OrdinalIgnoreCase)
            || !long.TryParse(client.AsSpan(prefix.Length), NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out long id))
        {
            return null;
        }

        return registry.Find(id) is { IsOpen: true } session ? session : null;
    }
}
