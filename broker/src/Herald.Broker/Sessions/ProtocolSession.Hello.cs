using System.Net;
using Herald.Broker.Compression;
using Herald.Broker.Engines;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Sessions;

/// <summary>
/// HELLO (spec §4.1, §4.2, §10): authentication, the identity and its quota, the capabilities granted, and a credential
/// refresh re-evaluating what the session holds.
/// </summary>
internal abstract partial class ProtocolSession
{
    /// <summary>All a client is told about a failed authentication (spec §4.1).</summary>
    public const string AuthenticationFailedMessage = "Authentication failed.";

    /// <summary>
    /// Accepts the client as <paramref name="identity"/> (spec §4.1-§4.2): returns the capabilities the
    /// broker grants of those requested. Called again on an open session, it is a credential refresh: it must
    /// name the same identity, and every subscription the new permissions no longer allow is ended and told
    /// (<see cref="Revoked"/>) before this returns.
    /// </summary>
    public Capabilities Open(Identity identity, string? clientName, Capabilities requested)
    {
        if (IsOpen && identity.Name != Identity.Name)
        {
            Broker.Log.AuthenticationFailed(Transport, RemoteEndPoint, "A refreshing credential named another identity.");
            throw new ProtocolException(ErrorCode.AuthenticationFailed, AuthenticationFailedMessage);
        }

        Volatile.Write(ref _identity, identity);
        _replyPermits = identity.Permissions.IsAllowAll || Broker.Responses is not { } responses ? null
            : _replyPermits ?? new ReplyPermits(responses.MaxMessages, responses.Expires, responses.MaxPerSession, Broker.Time);
        if (IsOpen)
        {
            Reevaluate(identity);
        }

        ClientName = clientName is { Length: > ProtocolConstants.MaxClientNameBytes } ? clientName[..ProtocolConstants.MaxClientNameBytes] : clientName;
        Capabilities accepted = (requested & Capabilities.Zstd) != 0 && Broker.Encoder.Enabled ? Capabilities.Zstd : Capabilities.None;
        if ((requested & Capabilities.Headers) != 0)
        {
            accepted |= Capabilities.Headers | (requested & Capabilities.NoResponders); // no_responders never without headers
            if (Broker.History is not null)
            {
                accepted |= requested & Capabilities.History; // told only where resuming can work: headers, and some history kept
            }
        }

        Backlog.AcceptsZstd = (accepted & Capabilities.Zstd) != 0;
        Backlog.AcceptsHeaders = (accepted & Capabilities.Headers) != 0;
        _noResponders = (accepted & Capabilities.NoResponders) != 0;
        accepted |= requested & Capabilities.QueueGroups; // every broker of this version routes them
        GrantsHistory = (accepted & Capabilities.History) != 0;
        GrantsQueueGroups = (accepted & Capabilities.QueueGroups) != 0;
        accepted |= GrantPresence(requested, accepted);
        accepted |= GrantServerSubscriptions(requested);
        GrantsDeltas = (requested & Capabilities.Deltas) != 0 && CarriesDeltas && Broker.Encoder.Deltas is not null; // spec §11.2
        accepted |= GrantsDeltas ? Capabilities.Deltas : Capabilities.None;
        Volatile.Write(ref _opened, true);
        return accepted;
    }

    /// <summary>
    /// Claims one client of the identity's quota (<see cref="LimitOptions.MaxConnectionsPerIdentity"/>), once,
    /// when the session is first opened; a refusal (<c>TooManyConnections</c>) says the transport must end it.
    /// Given back when the session's subscriptions end, or for a connection the registry counts, when its socket is gone.
    /// </summary>
    public Refusal ClaimQuota()
    {
        if (_usage is not null)
        {
            return default;
        }

        string key = IdentityQuotas.KeyOf(Identity, RemoteEndPoint);
        if (Broker.Quotas.TryClaimClient(key) is not { } usage)
        {
            return new Refusal(ErrorCode.TooManyConnections, $"'{key}' holds its maximum of {Limits.MaxConnectionsPerIdentity} connections.");
        }

        lock (_subscriptionsGate)
        {
            _usage = usage;
            if (!_subscriptionsEnded)
            {
                return default;
            }
        }

        ReleaseQuota(); // ended meanwhile
        return default;
    }

    /// <summary>
    /// A credential refresh (spec §4.1): ends every subscription the new permissions no longer allow, telling
    /// the client of each (<see cref="Revoked"/>); the rest record reply permissions as the identity now needs.
    /// </summary>
    private void Reevaluate(Identity identity)
    {
        List<Subscription>? revoked = null;
        lock (_subscriptionsGate)
        {
            if (_subscriptions is null || _subscriptionsEnded)
            {
                return;
            }

            foreach (Subscription subscription in _subscriptions.Values)
            {
                if (identity.Permissions.CanSubscribe(subscription.Pattern) && StillPresent(subscription, identity.Permissions))
                {
                    subscription.Replies = _replyPermits;
                }
                else
                {
                    (revoked ??= []).Add(subscription);
                }
            }

            foreach (Subscription subscription in revoked ?? [])
            {
                EndPresence(subscription.Sid, PresenceReason.Revoked);
                Broker.Router.Remove(subscription);
                subscription.Held = false; // a cluster resume waiting for it lets it go
                _subscriptions.Remove(subscription.Sid);
                _usage?.RemoveSubscription(subscription.Pattern);
            }

            Volatile.Write(ref _subscriptionCount, _subscriptions.Count);
        }

        foreach (Subscription subscription in revoked ?? [])
        {
            Broker.Metrics.ProtocolError(ErrorCode.PermissionDenied);
            Revoked(subscription.Sid, $"Subscription {subscription.Sid} to '{subscription.Pattern}' ended: the refreshed credential of '{identity.Name}' no longer permits it.");
        }
    }
}
