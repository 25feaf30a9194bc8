using System.Buffers;
using System.Text;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.Routing;
using Herald.Protocol;

namespace Herald.Broker.Sessions;

/// <summary>
/// Subscriptions the application's backend makes and ends through the server API (spec §4.10): made with a sid the broker
/// picks from its own half of the sid space, told to the client by a SUBSCRIBED frame before anything is delivered to it, and
/// held to the client's limits (subscriptions per connection, the identity's quota, the broker's pattern limit) and, unless
/// the backend forces it, to the client's own subscribe permissions; with join or presence events, to SUBSCRIBE's presence
/// rules (spec §15.1: one topic, presence granted, the join and presence permissions, the presence limits). Ended ones are
/// told by a non-fatal <c>Unsubscribed</c> ERROR naming the sid. A long-poll session or an SSE stream that asked for them
/// (granted with headers) is told in its own form: a MESSAGE of the sid whose header block carries <c>Herald-Subscribed</c>
/// or <c>Herald-Unsubscribed</c> (longpoll.md §1.4), an <c>event: subscribed</c> or <c>unsubscribed</c> (sse.md §2).
/// Called from the server API's thread, never the session's input: the subscription is made under
/// <c>_subscriptionsGate</c>, and the client's notices are queued through the thread-safe backlog.
/// </summary>
internal abstract partial class ProtocolSession
{
    /// <summary>The first sid the broker gives a subscription it makes (spec §4.10): clients choose theirs below it.</summary>
    public const uint FirstServerSid = 0x8000_0000;

    private uint _nextServerSid = FirstServerSid; // guarded by _subscriptionsGate

    /// <summary>Whether the client asked to be told of subscriptions the server makes (spec §4.1 bit 6) and its transport carries them.</summary>
    public bool GrantsServerSubscriptions { get; private set; }

    /// <summary>
    /// Whether this transport is framed (TCP, WebSocket): it carries SUBSCRIBED, and an ERROR naming a sid tells any client
    /// that a subscription ended. An HTTP one carries its notices in header blocks: only to a session that asked, with headers.
    /// </summary>
    protected virtual bool CarriesServerSubscriptions => false;

    /// <summary>
    /// The transport queues the notice of a subscription the server made (spec §4.10), before anything the router delivers
    /// to it. By default (long-poll) a MESSAGE of <paramref name="sid"/> on <paramref name="pattern"/>, empty, whose header
    /// block is <c>Herald-Subscribed: &lt;options&gt;</c>. Any thread.
    /// </summary>
    protected virtual void ServerSubscribed(uint sid, string pattern, SubscribeOptions options) =>
        Notice(sid, pattern, ProtocolConstants.SubscribedHeader, ((uint)options).ToString(System.Globalization.CultureInfo.InvariantCulture));

    /// <summary>
    /// The transport queues the notice that subscription <paramref name="sid"/> ended (spec §4.8's non-fatal <c>Unsubscribed</c>
    /// ERROR). By default (long-poll) a MESSAGE of the sid on <paramref name="pattern"/> whose header block is
    /// <c>Herald-Unsubscribed: &lt;reason&gt;</c>. Any thread.
    /// </summary>
    protected virtual void ServerUnsubscribed(uint sid, string pattern, string reason) =>
        Notice(sid, pattern, ProtocolConstants.UnsubscribedHeader, reason);

    /// <summary>Queues the notice MESSAGE (one header, no payload) for <paramref name="sid"/> and flushes it.</summary>
    private void Notice(uint sid, string pattern, string header, string value)
    {
        MessageBuffer frame = ControlFrames.Notice(pattern, header, value);
        if ((Backlog.Enqueue(frame, sid) & Enqueued.Wake) != 0)
        {
            Backlog.ScheduleFlush();
        }
    }

    /// <summary>Grants the server_subscriptions capability when asked for on a transport that carries it (called by <see cref="Open"/>).</summary>
    private Capabilities GrantServerSubscriptions(Capabilities requested)
    {
        GrantsServerSubscriptions = (requested & Capabilities.ServerSubscriptions) != 0 && (CarriesServerSubscriptions || Backlog.AcceptsHeaders);
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
                : $"This {Transport} session did not ask to be told of server-made subscriptions (with headers: longpoll.md §1.1 \"serverSubscriptions\", sse.md §1 server_subscriptions).");
        }

        if ((options & ~(SubscribeOptions.NoEcho | PresenceBits)) != 0)
        {
            return Refused("NotSupported", "A server-made subscription takes the no-echo, join and presence-events options only.");
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

        bool join = (options & SubscribeOptions.Join) != 0;
        bool watch = (options & SubscribeOptions.PresenceEvents) != 0;
        if ((join || watch) && PresenceRefusal(checkedPattern, join, watch) is { } refused)
        {
            return refused;
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
                ServerUnsubscribed(sid, checkedPattern, e.Message);
                return Refused(nameof(ErrorCode.TooManyTopics), e.Message);
            }

            _subscriptions.Add(sid, subscription);
            Volatile.Write(ref _subscriptionCount, _subscriptions.Count);
        }

        if ((join || watch) && await PresentAsync(sid, checkedPattern, options, join, watch).ConfigureAwait(false) is { } notJoined)
        {
            return notJoined;
        }

        await Broker.Interest.WhenSettledAsync().ConfigureAwait(false); // live on every node before the backend is answered
        return new ClientActionOutcome(1, Sid: sid);
    }

    /// <summary>SUBSCRIBE's presence rules for a server-made subscription (spec §15.1): refused when broken, else null. Forcing does not lift them.</summary>
    private ClientActionOutcome? PresenceRefusal(string topic, bool join, bool watch)
    {
        if (!GrantsPresence)
        {
            return Refused("NotSupported", "This client was not granted presence (spec §4.1 bit 5: asked for, with headers): it cannot join or get presence events.");
        }

        if (HasWildcards(topic))
        {
            return Refused(nameof(ErrorCode.InvalidTopic), $"Joining or presence events need one topic, not the pattern '{topic}' (spec §15.1).");
        }

        Security.Permissions permissions = Identity.Permissions;
        return join && !permissions.CanJoin(topic) ? Refused(nameof(ErrorCode.PermissionDenied), $"Joining '{topic}' is not permitted for '{Identity.Name}'.")
            : watch && !permissions.CanReadPresence(topic) ? Refused(nameof(ErrorCode.PermissionDenied), $"Reading the presence of '{topic}' is not permitted for '{Identity.Name}'.")
            : null;
    }

    /// <summary>
    /// The presence of the server-made subscription <paramref name="sid"/>, once it is made (its notice queued first): the
    /// topic's events to it, then its join, decided before the backend is answered. A join refused (a presence limit, the
    /// cluster's store unreachable) ends the subscription, told to the client, and is the answer; null when all is held.
    /// </summary>
    private async Task<ClientActionOutcome?> PresentAsync(uint sid, string topic, SubscribeOptions options, bool join, bool watch)
    {
        IPresence engine = Broker.Presence;
        if (watch)
        {
            engine.Watch(topic, Backlog, sid, (options & SubscribeOptions.NoEcho) != 0);
        }

        PresenceMember? member = join ? Member() : null;
        ClientActionOutcome? refused = null;
        if (member is not null)
        {
            try
            {
                if (await engine.JoinAsync(topic, member).ConfigureAwait(false) is { } full)
                {
                    refused = Refused(nameof(ErrorCode.PresenceFull), full);
                }
            }
            catch (ClusterUnavailableException e)
            {
                refused = Refused(nameof(ErrorCode.PresenceUnavailable), $"Presence is unavailable: {e.Message}");
            }
        }

        if (refused is null && Hold(sid, new PresenceHold(topic, member, watch)))
        {
            return null;
        }

        Undo(topic, sid, refused is null ? member : null, watch); // refused, or ended meanwhile: nothing stays in the engine
        if (refused is not null && UnsubscribeCore(sid).IsNone)
        {
            ServerUnsubscribed(sid, topic, refused.Value.Message!);
        }

        return refused ?? ClientActionOutcome.None;
    }

    /// <summary>
    /// Ends every subscription of the client whose pattern is exactly <paramref name="pattern"/>, whoever made it, telling the
    /// client of each (a non-fatal <c>Unsubscribed</c> ERROR with its sid): an <c>UnknownSubscription</c> refusal when none is.
    /// </summary>
    public ClientActionOutcome UnsubscribeFromServer(string pattern, string reason)
    {
        if (!CarriesServerSubscriptions && !GrantsServerSubscriptions)
        {
            return Refused("NotSupported", $"This {Transport} session cannot be told a subscription ended (it did not ask for server-made subscriptions): end the session, or refuse it at the client's next request.");
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
            ServerUnsubscribed(sid, pattern, reason);
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
