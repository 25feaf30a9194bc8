using System.Buffers;
using System.Text;
using Herald.Broker.Engines;
using Herald.Broker.Routing;
using Herald.Protocol;

namespace Herald.Broker.Sessions;

/// <summary>
/// Subscriptions the application's backend makes and ends through the server API (spec §4.10): made with a sid the broker
/// picks from its own half of the sid space, told to the client by a SUBSCRIBED frame before anything is delivered to it, and
/// held to the client's limits (subscriptions per connection, the identity's quota, the broker's pattern limit) and, unless
/// the backend forces it, to the client's own subscribe permissions. Ended ones are told by a non-fatal <c>Unsubscribed</c>
/// ERROR naming the sid. Only framed transports (TCP, WebSocket) carry these frames; long-poll and SSE sessions are answered
/// <c>NotSupported</c>. Called from the server API's thread, never the session's input: everything here runs under
/// <c>_subscriptionsGate</c>, and the client's frames are queued through the thread-safe backlog.
/// </summary>
internal abstract partial class ProtocolSession
{
    /// <summary>The first sid the broker gives a subscription it makes (spec §4.10): clients choose theirs below it.</summary>
    public const uint FirstServerSid = 0x8000_0000;

    private uint _nextServerSid = FirstServerSid; // guarded by _subscriptionsGate

    /// <summary>Whether the client asked to be told of subscriptions the server makes (spec §4.1 bit 6) and its transport carries them.</summary>
    public bool GrantsServerSubscriptions { get; private set; }

    /// <summary>Whether this transport can carry SUBSCRIBED and a non-fatal ERROR naming a sid (the framed ones).</summary>
    protected virtual bool CarriesServerSubscriptions => false;

    /// <summary>The transport queues SUBSCRIBED for a subscription the server made (spec §4.10). Any thread.</summary>
    protected virtual void ServerSubscribed(uint sid, string pattern, SubscribeOptions options)
    {
    }

    /// <summary>The transport queues the non-fatal <c>Unsubscribed</c> ERROR naming <paramref name="sid"/> (spec §4.8). Any thread.</summary>
    protected virtual void ServerUnsubscribed(uint sid, string reason)
    {
    }

    /// <summary>Grants the server_subscriptions capability when asked for on a transport that carries it (called by <see cref="Open"/>).</summary>
    private Capabilities GrantServerSubscriptions(Capabilities requested)
    {
        GrantsServerSubscriptions = (requested & Capabilities.ServerSubscriptions) != 0 && CarriesServerSubscriptions;
        return GrantsServerSubscriptions ? Capabilities.ServerSubscriptions : Capabilities.None;
    }

    /// <summary>
    /// Subscribes the client to <paramref name="pattern"/> for the server API: the pattern rules, the client's subscription
    /// limit, its permissions (unless <paramref name="force"/>), its identity's quota and the broker's pattern limit, in that
    /// order, each refusal answered to the API with its spec §8 code and nothing made. SUBSCRIBED is queued before the
    /// router has the subscription, so no MESSAGE for the sid reaches the client before it knows the sid; the answer waits
    /// until the subscription is settled on every node.
    /// </summary>
    public async Task<ClientActionOutcome> SubscribeFromServerAsync(string pattern, SubscribeOptions options, bool force)
    {
        if (!GrantsServerSubscriptions)
        {
            return Refused("NotSupported", CarriesServerSubscriptions
                ? "This client did not ask to be told of server-made subscriptions (HELLO capability server_subscriptions, spec §4.1)."
                : $"A {Transport} session has no server-made subscriptions: its subscriptions are its own requests (long-poll) or its URL (SSE).");
        }

        if ((options & ~SubscribeOptions.NoEcho) != 0)
        {
            return Refused("NotSupported", "A server-made subscription takes only the no-echo option.");
        }

        string checkedPattern;
        try
        {
            checkedPattern = TopicRules.CheckPattern(new ReadOnlySequence<byte>(Encoding.UTF8.GetBytes(pattern)), Limits.MaxTopicLength);
        }
        catch (ProtocolException e)
        {
            return Refused(e.Code.ToString(), e.Message);
        }

        uint sid;
        lock (_subscriptionsGate)
        {
            _subscriptions ??= [];
            if (_subscriptionsEnded)
            {
                return ClientActionOutcome.None; // closing: as if gone
            }

            if (_subscriptions.Count >= Limits.MaxSubscriptionsPerConnection)
            {
                return Refused(nameof(ErrorCode.TooManySubscriptions), $"The client holds its maximum of {Limits.MaxSubscriptionsPerConnection} subscriptions.");
            }

            if (!force && !Identity.Permissions.CanSubscribe(checkedPattern))
            {
                return Refused(nameof(ErrorCode.PermissionDenied), $"Subscribing to '{checkedPattern}' is not permitted for '{Identity.Name}' (force overrides the client's permissions).");
            }

            if (_usage?.TryAddSubscription(checkedPattern, Limits) is { } overQuota)
            {
                return Refused(nameof(ErrorCode.TooManyTopics), overQuota);
            }

            sid = NextServerSid();
            var subscription = new Subscription(Backlog, sid, checkedPattern, (options & SubscribeOptions.NoEcho) != 0, queue: null, Identity.Name) { Replies = _replyPermits };
            ServerSubscribed(sid, checkedPattern, options); // before the router can deliver to it
            try
            {
                Broker.Router.Add(subscription);
            }
            catch (ProtocolException e) when (e.Code == ErrorCode.TooManyTopics)
            {
                _usage?.RemoveSubscription(checkedPattern);
                ServerUnsubscribed(sid, e.Message);
                return Refused(nameof(ErrorCode.TooManyTopics), e.Message);
            }

            _subscriptions.Add(sid, subscription);
            Volatile.Write(ref _subscriptionCount, _subscriptions.Count);
        }

        await Broker.Interest.WhenSettledAsync().ConfigureAwait(false); // live on every node before the backend is answered
        return new ClientActionOutcome(1, Sid: sid);
    }

    /// <summary>
    /// Ends every subscription of the client whose pattern is exactly <paramref name="pattern"/>, whoever made it, telling the
    /// client of each (a non-fatal <c>Unsubscribed</c> ERROR with its sid): an <c>UnknownSubscription</c> refusal when none is.
    /// </summary>
    public ClientActionOutcome UnsubscribeFromServer(string pattern, string reason)
    {
        if (!CarriesServerSubscriptions)
        {
            return Refused("NotSupported", $"A {Transport} session cannot be told a subscription ended: end the session, or refuse it at the client's next request.");
        }

        List<uint>? ended = null;
        lock (_subscriptionsGate)
        {
            if (_subscriptions is null || _subscriptionsEnded)
            {
                return Refused(nameof(ErrorCode.UnknownSubscription), $"The client holds no subscription to '{pattern}'.");
            }

            foreach (Subscription subscription in _subscriptions.Values)
            {
                if (subscription.Pattern == pattern)
                {
                    (ended ??= []).Add(subscription.Sid);
                }
            }

            foreach (uint sid in ended ?? [])
            {
                _subscriptions.Remove(sid, out Subscription? subscription);
                EndPresence(sid, PresenceReason.Unsubscribe);
                Broker.Router.Remove(subscription!);
                subscription!.Held = false; // a cluster resume waiting for it lets it go
                _usage?.RemoveSubscription(subscription.Pattern);
            }

            Volatile.Write(ref _subscriptionCount, _subscriptions.Count);
        }

        if (ended is null)
        {
            return Refused(nameof(ErrorCode.UnknownSubscription), $"The client holds no subscription to '{pattern}'.");
        }

        foreach (uint sid in ended)
        {
            ServerUnsubscribed(sid, reason);
        }

        return new ClientActionOutcome(1, Sid: ended[0]);
    }

    /// <summary>The next free sid of the broker's half (caller holds <c>_subscriptionsGate</c>); wraps within it, skipping live ones.</summary>
    private uint NextServerSid()
    {
        while (true)
        {
            uint sid = _nextServerSid;
            _nextServerSid = sid == uint.MaxValue ? FirstServerSid : sid + 1;
            if (!_subscriptions!.ContainsKey(sid))
            {
                return sid;
            }
        }
    }

    /// <summary>A refusal of the server API's action: this client was found, the action not carried out.</summary>
    private static ClientActionOutcome Refused(string code, string message) => new(0, Code: code, Message: message);
}
