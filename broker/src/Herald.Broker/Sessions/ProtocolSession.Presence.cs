using System.Buffers;
using System.Globalization;
using System.Text;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.Routing;
using Herald.Protocol;

namespace Herald.Broker.Sessions;

/// <summary>
/// Presence (spec §15): SUBSCRIBE's join and presence-events bits, the leave of every way a subscription ends, and
/// PRESENCE answered with PRESENCE_REPLY. The capability and the permissions are checked first, the engine
/// (<see cref="BrokerCore.Presence"/>) is asked last; nothing here runs per publication.
/// </summary>
internal abstract partial class ProtocolSession
{
    private const SubscribeOptions PresenceBits = SubscribeOptions.Join | SubscribeOptions.PresenceEvents;

    // What each subscription with presence bits holds in the engine, by sid; guarded by _subscriptionsGate.
    private Dictionary<uint, PresenceHold>? _presence;

    /// <summary>The client may be present, get events and ask who is present (spec §4.1 bit 5): it asked, with headers, and the broker grants it.</summary>
    public bool GrantsPresence { get; private set; }

    /// <summary>
    /// The client info the client chose (spec §4.1): HELLO's, a long-poll session's <c>"info"</c>, an SSE stream's
    /// <c>info</c> parameter, each held to <see cref="CheckedInfo"/>; a credential's <c>herald_info</c> wins over it.
    /// </summary>
    public string? HelloInfo { get; set; }

    /// <summary>
    /// Client info a transport without HELLO received (a long-poll create, an SSE URL), held to <c>max_presence_info</c>
    /// as HELLO's is: over it is <c>MalformedFrame</c> (over HTTP, 400 <c>MalformedRequest</c>), before anything is made.
    /// </summary>
    public static string? CheckedInfo(BrokerCore broker, string? info)
    {
        int max = broker.Presence.Options.MaxInfoBytes;
        if (info is not null && Encoding.UTF8.GetByteCount(info) is var bytes && bytes > max)
        {
            Throw(ErrorCode.MalformedFrame, $"The client info is {bytes} bytes; at most {max} are allowed (Herald:Presence:MaxInfoBytes).");
        }

        return info;
    }

    /// <summary>This connection's client id (spec §15.1): unique among the broker's (the cluster's: the engine's prefix) sessions while it lives, fixed width so ids sort as numbers.</summary>
    public string PresenceClient => Broker.Presence.ClientPrefix + Id.ToString("x16", CultureInfo.InvariantCulture);

    /// <summary>Grants the presence capability when asked for with headers granted and the broker's presence on (called by <see cref="Open"/>).</summary>
    private Capabilities GrantPresence(Capabilities requested, Capabilities accepted)
    {
        GrantsPresence = (requested & Capabilities.Presence) != 0 && (accepted & Capabilities.Headers) != 0 && Broker.Presence.Enabled;
        return GrantsPresence ? Capabilities.Presence : Capabilities.None;
    }

    /// <summary>
    /// SUBSCRIBE with join or presence events (spec §15.1): one topic, the capability granted, then subscribe, join and
    /// presence permissions (refused with the SUBSCRIBE's sid, nothing done), then the events, the join (its limits), and
    /// the subscription itself; a refusal of any step undoes the steps before it.
    /// </summary>
    private Refusal SubscribePresent(uint sid, in ReadOnlySequence<byte> pattern, bool noEcho, StreamPosition? since, string? queue, SubscribeOptions presence)
    {
        if (!GrantsPresence)
        {
            Throw(ErrorCode.MalformedFrame, "A SUBSCRIBE asked to join or for presence events without negotiating presence (HELLO's capabilities with headers, or long-poll's \"headers\": true).");
        }

        string topic = CheckSubscribe(sid, pattern);
        if (HasWildcards(topic))
        {
            Throw(ErrorCode.MalformedFrame, $"A SUBSCRIBE asked to join or for presence events on '{topic}', a pattern with wildcards: presence is one topic's.");
        }

        bool join = (presence & SubscribeOptions.Join) != 0;
        bool watch = (presence & SubscribeOptions.PresenceEvents) != 0;
        Security.Permissions permissions = Identity.Permissions;
        if (!permissions.CanSubscribe(topic) || (join && !permissions.CanJoin(topic)) || (watch && !permissions.CanReadPresence(topic)))
        {
            string what = !permissions.CanSubscribe(topic) ? "Subscribing to" : join && !permissions.CanJoin(topic) ? "Joining" : "Reading the presence of";
            return Denied($"{what} '{topic}' is not permitted for '{Identity.Name}'.") with { Sid = sid };
        }

        IPresence engine = Broker.Presence;
        PresenceMember? member = join ? Member() : null;
        if (watch)
        {
            engine.Watch(topic, Backlog, sid, noEcho);
        }

        Task<string?>? joining = null;
        if (member is not null)
        {
            try
            {
                ValueTask<string?> joined = engine.JoinAsync(topic, member);
                if (!joined.IsCompleted)
                {
                    joining = joined.AsTask(); // the cluster's store decides: the subscription is made meanwhile (Joining)
                }
                else if (joined.GetAwaiter().GetResult() is { } full)
                {
                    Undo(topic, sid, null, watch);
                    return Refuse(ErrorCode.PresenceFull, full) with { Sid = sid };
                }
            }
            catch (ClusterUnavailableException e)
            {
                Undo(topic, sid, null, watch);
                return Refuse(ErrorCode.PresenceUnavailable, $"Presence is unavailable: {e.Message}") with { Sid = sid };
            }
        }

        Refusal answer;
        try
        {
            answer = queue is not null ? SubscribeQueue(sid, pattern, noEcho, since, queue)
                : since is { } position ? SubscribeSince(sid, pattern, noEcho, position)
                : SubscribeCore(sid, pattern, noEcho);
        }
        catch (ProtocolException)
        {
            Undo(topic, sid, member, watch);
            throw;
        }

        if (!answer.IsNone || !Hold(sid, new PresenceHold(topic, member, watch)))
        {
            Undo(topic, sid, member, watch); // refused, or the session closed meanwhile: nothing stays in the engine
        }
        else if (joining is not null)
        {
            Joining(sid, member!, joining);
        }

        return answer;
    }

    /// <summary>
    /// A join the engine decides later (a cluster's store, spec §15.5): the transport reads nothing more until it is
    /// decided (<see cref="AwaitsInterest"/>), so the member's next publication follows its join; a refusal is told
    /// (<see cref="JoinRefused"/>, naming the sid) and ends that subscription's join, the subscription staying.
    /// </summary>
    private void Joining(uint sid, PresenceMember member, Task<string?> joining)
    {
        Task decided = JoinDecidedAsync(sid, member, joining);
        lock (_subscriptionsGate)
        {
            _joins = _joins is { IsCompleted: false } earlier ? Task.WhenAll(earlier, decided) : decided;
        }
    }

    private async Task JoinDecidedAsync(uint sid, PresenceMember member, Task<string?> joining)
    {
        ErrorCode code;
        string why;
        try
        {
            if (await joining.ConfigureAwait(false) is not { } full)
            {
                return;
            }

            (code, why) = (ErrorCode.PresenceFull, full);
        }
        catch (ClusterUnavailableException e)
        {
            (code, why) = (ErrorCode.PresenceUnavailable, $"Presence is unavailable: {e.Message}");
        }

        lock (_subscriptionsGate)
        {
            if (_presence is null || !_presence.TryGetValue(sid, out PresenceHold hold) || !ReferenceEquals(hold.Member, member))
            {
                return; // the subscription ended meanwhile
            }

            _presence[sid] = hold with { Member = null };
        }

        Broker.Metrics.ProtocolError(code);
        JoinRefused(sid, code, why);
    }

    /// <summary>
    /// The engine refused subscription <paramref name="sid"/>'s join after the subscription was made (spec §15.1, §15.5):
    /// the transport tells the client (framed: a non-fatal ERROR naming the sid). By default it is kept for
    /// <see cref="JoinDecidedAsync"/>, which an HTTP transport awaits before it answers the subscription. Any thread.
    /// </summary>
    protected virtual void JoinRefused(uint sid, ErrorCode code, string message)
    {
        lock (_subscriptionsGate)
        {
            (_refusedJoins ??= [])[sid] = new Refusal(code, message) { Sid = sid };
        }
    }

    // Joins refused after their subscription was made, until an HTTP transport takes them (one per joined sid at most); guarded by _subscriptionsGate.
    private Dictionary<uint, Refusal>? _refusedJoins;

    /// <summary>
    /// For a transport that answers a subscription once (long-poll, SSE): waits until subscription <paramref name="sid"/>'s
    /// join is decided; refused (a cluster's topic is full, or its store unreachable), the subscription is ended, so the
    /// answer means what a refusal at once means (nothing subscribed), and the refusal is returned.
    /// </summary>
    public async Task<Refusal> JoinDecidedAsync(uint sid)
    {
        if (_joins is { } joins)
        {
            await joins.ConfigureAwait(false);
        }

        Refusal refused;
        lock (_subscriptionsGate)
        {
            if (_refusedJoins is null || !_refusedJoins.Remove(sid, out refused))
            {
                return default;
            }
        }

        UnsubscribeCore(sid);
        return refused;
    }

    /// <summary>Keeps what subscription <paramref name="sid"/> holds in the engine, if it is still live (a close may have ended it).</summary>
    private bool Hold(uint sid, PresenceHold hold)
    {
        lock (_subscriptionsGate)
        {
            if (_subscriptionsEnded || _subscriptions?.ContainsKey(sid) != true)
            {
                return false;
            }

            (_presence ??= []).Add(sid, hold);
            return true;
        }
    }

    private void Undo(string topic, uint sid, PresenceMember? member, bool watched)
    {
        if (member is not null)
        {
            Broker.Presence.Leave(topic, member, PresenceReason.Unsubscribe);
        }

        if (watched)
        {
            Broker.Presence.Unwatch(topic, Backlog, sid);
        }
    }

    /// <summary>Subscription <paramref name="sid"/> ended: what it held in the engine goes (its member leaves, with <paramref name="reason"/>). Caller holds <c>_subscriptionsGate</c>.</summary>
    private void EndPresence(uint sid, PresenceReason reason)
    {
        if (_presence is null || !_presence.Remove(sid, out PresenceHold hold))
        {
            return;
        }

        if (hold.Member is not null)
        {
            Broker.Presence.Leave(hold.Topic, hold.Member, reason);
        }

        if (hold.Watching)
        {
            Broker.Presence.Unwatch(hold.Topic, Backlog, sid);
        }
    }

    /// <summary>Whether a refreshed credential still grants what subscription <paramref name="subscription"/> holds of presence (spec §4.1, §15.1). Caller holds <c>_subscriptionsGate</c>.</summary>
    private bool StillPresent(Subscription subscription, Security.Permissions permissions) =>
        _presence is null || !_presence.TryGetValue(subscription.Sid, out PresenceHold hold)
        || ((hold.Member is null || permissions.CanJoin(hold.Topic)) && (!hold.Watching || permissions.CanReadPresence(hold.Topic)));

    /// <summary>This connection as a member (spec §15.1): its client id, identity (<c>""</c> with authentication off) and info (the credential's, else HELLO's).</summary>
    private PresenceMember Member()
    {
        string? info = Identity.Info ?? HelloInfo;
        if (info is not null && Encoding.UTF8.GetByteCount(info) > Broker.Presence.Options.MaxInfoBytes)
        {
            info = null; // a herald_info claim over the limit is not shown (HELLO's is refused when read)
        }

        string identity = Broker.Authenticator.Mode == Security.AuthMode.None ? "" : Identity.Name;
        return new PresenceMember(PresenceClient, identity, info, IdentityQuotas.KeyOf(Identity, RemoteEndPoint), Backlog);
    }

    /// <summary>PRESENCE requests a connection may have unanswered before its input stops (spec §15.3).</summary>
    public const int MaxPresenceUnanswered = 16;

    // PRESENCE requests read and not yet answered (the engine asks its store); Interlocked.
    private int _presenceUnanswered;

    /// <summary>PRESENCE requests read from this connection and not yet answered: the transport reads no more while it is <see cref="MaxPresenceUnanswered"/>.</summary>
    public int PresenceUnanswered => Volatile.Read(ref _presenceUnanswered);

    /// <summary>The most PRESENCE requests this connection ever had unanswered at once (monitoring, tests: never above <see cref="MaxPresenceUnanswered"/>).</summary>
    public int PresenceUnansweredMost => Volatile.Read(ref _presenceUnansweredMost);

    private int _presenceUnansweredMost;

    /// <summary>
    /// PRESENCE (spec §15.3) on a framed transport: the checks every transport shares (<see cref="CheckPresenceQuery"/>),
    /// then one page of members, as many as fit in <c>max_frame</c>. The checks run now (on the caller's thread, in order
    /// with the connection's other frames); the page is read from the engine, at once on a single node, from Redis in a
    /// cluster: the answer then completes later, counted in <see cref="PresenceUnanswered"/> until it does, and a store
    /// that cannot be reached is answered <c>PresenceUnavailable</c>.
    /// </summary>
    public ValueTask<MessageBuffer> PresenceAsync(in PresenceFrame request, out Refusal notice)
    {
        if (!GrantsPresence)
        {
            Throw(ErrorCode.UnexpectedFrame, "PRESENCE from a client that did not negotiate presence (HELLO's capabilities).");
        }

        ReadOnlySpan<byte> bytes = request.Topic.IsSingleSegment ? request.Topic.FirstSpan : request.Topic.ToArray();
        PresenceQuery query = CheckPresenceQuery(bytes, request.Limit, out notice);
        if (query.Code != ErrorCode.None)
        {
            return new(Reply(request.RequestId, query.Code, default));
        }

        ValueTask<PresencePage> read;
        try
        {
            read = Broker.Presence.ReadAsync(query.Topic, query.Limit, request.Cursor);
        }
        catch (ClusterUnavailableException)
        {
            return new(Reply(request.RequestId, ErrorCode.PresenceUnavailable, default));
        }

        return read.IsCompletedSuccessfully ? new(Reply(request.RequestId, ErrorCode.None, read.Result)) : ReplyLaterAsync(request.RequestId, read);
    }

    /// <summary>
    /// What every reading of a topic's presence is held to (spec §15.3), on every transport (PRESENCE, HTTP's
    /// <c>GET /presence</c>): charged as one subscription change (<paramref name="notice"/>: <c>RateLimited</c>, the
    /// transport pauses), the topic's rules (thrown, as in PUBLISH), a topic with wildcards answered <c>InvalidTopic</c>,
    /// the permissions (subscribe and presence; refused with nothing else, not even the count), and the page capped at
    /// <see cref="PresenceOptions.MaxPageSize"/>. The caller reads the engine only when the code is <c>None</c>.
    /// </summary>
    public PresenceQuery CheckPresenceQuery(ReadOnlySpan<byte> topic, ulong limit, out Refusal notice)
    {
        notice = Answer(TakeSubscriptionToken(), default);
        ErrorCode broken = Topic.ValidatePattern(topic, Limits.MaxTopicLength);
        if (broken != ErrorCode.None)
        {
            Throw(broken, Topic.Describe(broken, topic, Limits.MaxTopicLength));
        }

        string name = Encoding.UTF8.GetString(topic);
        if (Topic.HasWildcard(topic))
        {
            return new PresenceQuery(ErrorCode.InvalidTopic, name, 0);
        }

        if (!Identity.Permissions.CanSubscribe(name) || !Identity.Permissions.CanReadPresence(name))
        {
            Broker.Metrics.ProtocolError(ErrorCode.PermissionDenied);
            return new PresenceQuery(ErrorCode.PermissionDenied, name, 0);
        }

        return new PresenceQuery(ErrorCode.None, name, (int)Math.Min(limit, (ulong)Broker.Presence.Options.MaxPageSize));
    }

    /// <summary>A PRESENCE answer took the connection below <see cref="MaxPresenceUnanswered"/>: a transport whose input waits for that goes on.</summary>
    protected virtual void PresenceAnswered()
    {
    }

    /// <summary>The answer of a PRESENCE whose page the engine reads from its store: counted unanswered until it completes.</summary>
    private async ValueTask<MessageBuffer> ReplyLaterAsync(uint requestId, ValueTask<PresencePage> read)
    {
        int held = Interlocked.Increment(ref _presenceUnanswered);
        for (int most = PresenceUnansweredMost; held > most; most = PresenceUnansweredMost)
        {
            Interlocked.CompareExchange(ref _presenceUnansweredMost, held, most);
        }

        try
        {
            return Reply(requestId, ErrorCode.None, await read.ConfigureAwait(false));
        }
        catch (ClusterUnavailableException)
        {
            return Reply(requestId, ErrorCode.PresenceUnavailable, default);
        }
        finally
        {
            if (Interlocked.Decrement(ref _presenceUnanswered) == MaxPresenceUnanswered - 1)
            {
                PresenceAnswered();
            }
        }
    }

    /// <summary>A PRESENCE_REPLY within <c>max_frame</c>: entries past what fits are left for the next page.</summary>
    private MessageBuffer Reply(uint requestId, ErrorCode code, PresencePage page)
    {
        IReadOnlyList<PresenceEntry> entries = page.Entries ?? [];
        string? next = page.Next;
        var writer = new ArrayBufferWriter<byte>(256);
        while (true)
        {
            FrameWriter.WritePresenceReply(writer, requestId, code, (ulong)page.Occupancy.Members, (ulong)page.Occupancy.Identities, entries, next);
            if (writer.WrittenCount - ProtocolConstants.LengthPrefixSize <= Limits.MaxFrameBytes || entries.Count == 0)
            {
                return MessageBuffer.Copy(writer.WrittenSpan);
            }

            // Over max_frame: halve the page; its last entry is the cursor of the next.
            entries = [.. entries.Take(entries.Count / 2)];
            next = entries.Count > 0 ? entries[^1].Client : null;
            writer.ResetWrittenCount();
        }
    }

    /// <summary>A checked presence read (<see cref="CheckPresenceQuery"/>): <see cref="ErrorCode.None"/> and the page to read, or why not.</summary>
    public readonly record struct PresenceQuery(ErrorCode Code, string Topic, int Limit);

    /// <summary>What one subscription holds in the engine: its topic, its member (join) and whether it gets the events.</summary>
    private readonly record struct PresenceHold(string Topic, PresenceMember? Member, bool Watching);
}
