using System.Buffers;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.History;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Protocol;

namespace Herald.Broker.Sessions;

/// <summary>
/// SUBSCRIBE and UNSUBSCRIBE (spec §4.3, §4.4, §13, §14): the checks, the queue groups, a resume from a topic's history (in
/// a cluster, read from the shared history), the subscription-change rate, and the settling a transport waits for before it
/// answers.
/// </summary>
internal abstract partial class ProtocolSession
{
    /// <summary>
    /// SUBSCRIBE (spec §4.3): charged to the subscription-change rate, then the sid and pattern rules, the
    /// subscription limits (the client's, its identity's), permissions, the broker's pattern limit. A pattern a subscribe
    /// hook reaches is decided by the application's backend first (<see cref="Deciding"/> while it is asked).
    /// </summary>
    /// <param name="since">Resume the topic's history after this position (spec §13): the subscription is answered
    /// with a status MESSAGE, then what it missed, then the live stream. Only for a client granted headers.</param>
    /// <param name="queue">The queue group to join (spec §14), or null: only for a client granted queue_groups, never with <paramref name="since"/>.</param>
    /// <param name="presence">SUBSCRIBE's join and presence-events bits (spec §15.1, §15.2); other bits are ignored.</param>
    public Refusal Subscribe(uint sid, in ReadOnlySequence<byte> pattern, bool noEcho, StreamPosition? since = null, string? queue = null, SubscribeOptions presence = SubscribeOptions.None)
    {
        if (Broker.Access.DecidesSubscriptions && SubscribeWaitsOrRefused(sid, pattern, out Refusal decided))
        {
            return decided; // refused by the backend, or waiting for it (nothing done, nothing charged: carried out again)
        }

        bool overRate = TakeSubscriptionToken();
        try
        {
            Refusal answer = (presence & PresenceBits) != 0 ? SubscribePresent(sid, pattern, noEcho, since, queue, presence & PresenceBits)
                : queue is not null ? SubscribeQueue(sid, pattern, noEcho, since, queue)
                : since is { } position ? SubscribeSince(sid, pattern, noEcho, position)
                : SubscribeCore(sid, pattern, noEcho);
            if ((presence & SubscribeOptions.Delta) != 0 && queue is null && answer.Code == ErrorCode.None)
            {
                StartDelta(sid);
            }

            return Answer(overRate, answer);
        }
        catch (ProtocolException) when (overRate)
        {
            _subscriptionChanges.Unwarn(); // refused fatally (long-poll: only this request fails): the next change is told
            throw;
        }
    }

    /// <summary>Whether the client applies deltas (spec §4.1 bit 7, §11.2): asked for, on a framed transport, with deltas on.</summary>
    public bool GrantsDeltas { get; private set; }

    /// <summary>Whether this transport carries deltas: the framed ones, and a long-poll session's binary answers (not a shared one's); never SSE's JSON.</summary>
    protected virtual bool CarriesDeltas => false;

    /// <summary>
    /// The subscription asked for deltas (spec §4.3 bit 3): honoured with the capability on a topic without wildcards, else
    /// ignored (full messages, no ERROR). Its sink tracks what the sid holds before the first delta can be queued.
    /// </summary>
    private void StartDelta(uint sid)
    {
        if (!GrantsDeltas || Broker.Encoder.Deltas is not { } deltas)
        {
            return;
        }

        lock (_subscriptionsGate)
        {
            if (_subscriptions?.GetValueOrDefault(sid) is { Group: null, Delta: null } subscription && subscription.Pattern.AsSpan().IndexOfAny('*', '>') < 0)
            {
                subscription.StartDelta(deltas.Enroll(subscription.Pattern));
            }
        }
    }

    /// <summary>UNSUBSCRIBE (spec §4.4): charged to the subscription-change rate; an unknown sid is refused, not fatal.</summary>
    public Refusal Unsubscribe(uint sid)
    {
        bool overRate = TakeSubscriptionToken();
        return Answer(overRate, UnsubscribeCore(sid));
    }

    private Refusal SubscribeCore(uint sid, in ReadOnlySequence<byte> pattern, bool noEcho) =>
        AddSubscription(sid, CheckSubscribe(sid, pattern), noEcho);

    /// <summary>SUBSCRIBE with a queue group (spec §4.3, §14): the shape rules, the pattern's, then the name's.</summary>
    private Refusal SubscribeQueue(uint sid, in ReadOnlySequence<byte> pattern, bool noEcho, StreamPosition? since, string queue)
    {
        if (!GrantsQueueGroups)
        {
            Throw(ErrorCode.MalformedFrame, "A SUBSCRIBE named a queue group without negotiating queue_groups (HELLO's capabilities).");
        }

        if (since is not null)
        {
            Throw(ErrorCode.MalformedFrame, "A SUBSCRIBE named both a queue group and a since: a queue group has no position to resume.");
        }

        string checkedPattern = CheckSubscribe(sid, pattern);
        if (!Topic.IsQueueName(queue))
        {
            Throw(ErrorCode.InvalidTopic, Topic.DescribeQueueName(queue));
        }

        return AddSubscription(sid, checkedPattern, noEcho, queue: queue);
    }

    private string CheckSubscribe(uint sid, in ReadOnlySequence<byte> pattern)
    {
        if (sid == 0)
        {
            Throw(ErrorCode.DuplicateSubscription, "Subscription id 0 is not allowed.");
        }

        return TopicRules.CheckPattern(pattern, Limits.MaxTopicLength);
    }

    /// <summary>
    /// SUBSCRIBE with <c>since</c> (spec §13). The permission is checked first: a refused resume finds, makes and reads
    /// nothing. On a topic that keeps a history, the history adds the subscription and queues the status and what was
    /// missed under its gate (no gap, no duplicate); a topic whose history no publication has made yet is answered from
    /// the store (<see cref="HistoryStore.ResumeUnborn"/>: a resume never makes a history); on anything else (a pattern
    /// with wildcards, a topic without history) the subscription is made live and answered "not recovered". Either way
    /// the status MESSAGE comes before any other MESSAGE of the subscription.
    /// </summary>
    private Refusal SubscribeSince(uint sid, in ReadOnlySequence<byte> pattern, bool noEcho, StreamPosition since)
    {
        if (!Backlog.AcceptsHeaders)
        {
            Throw(ErrorCode.MalformedFrame, "A SUBSCRIBE with since was sent without negotiating headers: its answer is a status MESSAGE with a header block (HELLO's capabilities, or long-poll's \"headers\": true).");
        }

        string checkedPattern = CheckSubscribe(sid, pattern);
        if (!Identity.Permissions.CanSubscribe(checkedPattern))
        {
            return Denied($"Subscribing to '{checkedPattern}' is not permitted for '{Identity.Name}'.");
        }

        HistoryStore? store = Broker.History;
        if (store is null || HasWildcards(checkedPattern) || !store.Keeps(checkedPattern))
        {
            Refusal refused = AddSubscription(sid, checkedPattern, noEcho);
            if (refused.IsNone)
            {
                string why = HasWildcards(checkedPattern) ? "A pattern with wildcards has no single history to resume" : "This topic keeps no history";
                NotResumable(sid, checkedPattern, why, _toFlush);
            }

            return refused;
        }

        if (store.Shared)
        {
            return SubscribeSinceShared(sid, checkedPattern, noEcho, since, store);
        }

        Refusal answer = default;
        Func<bool> add = () => (answer = AddSubscription(sid, checkedPattern, noEcho)).IsNone;
        ResumeOutcome? outcome;
        while (true)
        {
            if (store.FindExisting(checkedPattern) is { } history)
            {
                outcome = history.Resume(since, add, Backlog, sid, _toFlush, Limits.MaxPayloadBytes);
                break;
            }

            outcome = store.ResumeUnborn(checkedPattern, since, add, Backlog, sid, _toFlush, out bool made);
            if (!made)
            {
                break;
            }
        }

        if (outcome is { } resumed)
        {
            store.Resumed(resumed.Recovered);
            Resumed(sid, resumed);
        }

        return answer;
    }

    /// <summary>
    /// The cluster's history is in Redis (spec cluster.md §9): the subscription is routed held (so this node's interest in
    /// the topic settles), then Redis is read and the replay queued; it joins the live stream where the replay ends. The
    /// node's bridge for the topic is made only while there is room (<see cref="HistoryStore.FindForResume"/>); without
    /// one the subscription is made live and answered "not recovered".
    /// </summary>
    private Refusal SubscribeSinceShared(uint sid, string checkedPattern, bool noEcho, StreamPosition since, HistoryStore store)
    {
        if (store.FindForResume(checkedPattern) is not { } history)
        {
            Refusal refused = AddSubscription(sid, checkedPattern, noEcho);
            if (refused.IsNone)
            {
                NotResumable(sid, checkedPattern, $"History unavailable: this node holds its maximum of {store.Options.MaxTopics} histories (Herald:History:MaxTopics)", _toFlush);
            }

            return refused;
        }

        var held = new Subscription(Backlog, sid, checkedPattern, noEcho) { Held = true };
        Refusal answer = AddSubscription(sid, checkedPattern, noEcho, held);
        if (answer.IsNone)
        {
            // One read at a time per session, each within what its queue has room for: a client naming a big history
            // many times makes Redis send no more than its pending limit at once. (Started outside the gate: a resume
            // may run to the topic's gate at once, which is taken before this one.) Caller: the session's input.
            Task earlier;
            lock (_subscriptionsGate)
            {
                earlier = _resumes ?? Task.CompletedTask;
            }

            Task resume = ResumeSharedAsync(history, since, held, earlier);
            lock (_subscriptionsGate)
            {
                _resumes = resume;
            }
        }

        return answer;
    }

    private static bool HasWildcards(string pattern) => pattern.AsSpan().IndexOfAny('*', '>') >= 0;

    /// <summary>
    /// A cluster resume (spec cluster.md §9): after the session's <paramref name="earlier"/> resumes, waits for this node's
    /// Redis subscription, reads Redis within what the session's queue has room for (its pending limits, less what is
    /// queued: <see cref="ISharedHistory.ReadAsync"/> stops there), then queues status and replay under the topic's gate.
    /// A replay that would pass that room is not sent: the status says so (410), and the live stream follows.
    /// </summary>
    private async Task ResumeSharedAsync(TopicHistory history, StreamPosition since, Subscription held, Task earlier)
    {
        await earlier.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        ResumeOutcome outcome;
        var toFlush = new List<IMessageSink>(1);
        try
        {
            await Broker.Interest.WhenSettledAsync().ConfigureAwait(false);
            (long pendingMessages, long pendingBytes) = Backlog.Pending;
            BacklogLimits limits = Backlog.Limits;
            int maxEntries = (int)Math.Clamp(limits.MaxMessages - pendingMessages, 1, history.Rule.MaxMessages);
            long maxBytes = Math.Max(0, limits.MaxBytes - pendingBytes);
            SharedRead read = await Broker.SharedHistory.ReadAsync(history, since, maxEntries, maxBytes).ConfigureAwait(false);
            outcome = history.ResumeShared(since, read, held, Backlog, toFlush, Limits.MaxPayloadBytes, Limits.MaxFrameBytes, Broker.SharedHistory.DecodeKept);
        }
        catch (ClusterUnavailableException e)
        {
            // Redis unreachable: no replay; the subscription goes live at once and says so.
            held.Held = false;
            NotResumable(held.Sid, history.Topic, $"History unavailable: Redis did not answer ({e.Message})", toFlush);
            Backlog.ScheduleFlush();
            return;
        }

        Broker.History!.Resumed(outcome.Recovered);
        Resumed(held.Sid, outcome);
        if (toFlush.Count > 0)
        {
            Backlog.ScheduleFlush();
        }
    }

    /// <summary>The transport learns how a resume went (long-poll answers it in the subscribe response); TCP has nothing to add to the status MESSAGE.</summary>
    protected virtual void Resumed(uint sid, ResumeOutcome outcome)
    {
    }

    /// <summary>The status MESSAGE of a resume that cannot be (spec §13): 410 with why, and no position.</summary>
    private void NotResumable(uint sid, string topic, string why, List<IMessageSink> toFlush)
    {
        byte[] headers = HeaderBlock.Encode(
        [
            new(StreamPosition.StatusHeader, [StreamPosition.NotRecovered]),
            new(StreamPosition.DescriptionHeader, [why]),
        ]);
        byte[] name = System.Text.Encoding.UTF8.GetBytes(topic);
        MessageBuffer frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize(name.Length, 0, PayloadFlags.None, 0) + headers.Length);
        FrameWriter.WriteMessage(new MessageBufferWriter(frame), 0, name, default, PayloadFlags.None, default, headers);
        if ((Backlog.Enqueue(frame, sid) & Enqueued.Wake) != 0)
        {
            toFlush.Add(Backlog);
        }

        Broker.History?.Resumed(false);
        Resumed(sid, new ResumeOutcome(false, why, default, 0));
    }

    private Refusal AddSubscription(uint sid, string checkedPattern, bool noEcho, Subscription? held = null, string? queue = null)
    {
        lock (_subscriptionsGate)
        {
            _subscriptions ??= [];
            if (_subscriptionsEnded)
            {
                return default; // closing: nothing more is routed to this session
            }

            if (_subscriptions.ContainsKey(sid))
            {
                Throw(ErrorCode.DuplicateSubscription, $"Subscription id {sid} is already in use by this client.");
            }

            if (_subscriptions.Count >= Limits.MaxSubscriptionsPerConnection)
            {
                Throw(ErrorCode.TooManySubscriptions, $"More than {Limits.MaxSubscriptionsPerConnection} subscriptions for one client.");
            }

            if (!Identity.Permissions.CanSubscribe(checkedPattern))
            {
                return Denied($"Subscribing to '{checkedPattern}' is not permitted for '{Identity.Name}'.");
            }

            if (_usage?.TryAddSubscription(checkedPattern, Limits) is { } overQuota)
            {
                return Refuse(ErrorCode.TooManyTopics, overQuota);
            }

            Subscription subscription = held ?? new Subscription(Backlog, sid, checkedPattern, noEcho, queue, Identity.Name);
            subscription.Replies = _replyPermits;
            try
            {
                Broker.Router.Add(subscription);
            }
            catch (ProtocolException e) when (e.Code == ErrorCode.TooManyTopics)
            {
                _usage?.RemoveSubscription(checkedPattern);
                return Refuse(e.Code, e.Message); // refused, told; the session stays
            }

            _subscriptions.Add(sid, subscription);
            Volatile.Write(ref _subscriptionCount, _subscriptions.Count);
            _interestChanged = true;
        }

        return default;
    }

    private Refusal UnsubscribeCore(uint sid)
    {
        lock (_subscriptionsGate)
        {
            if (_subscriptions is null || !_subscriptions.Remove(sid, out Subscription? subscription))
            {
                return Refuse(ErrorCode.UnknownSubscription, $"No live subscription with id {sid}.");
            }

            EndPresence(sid, PresenceReason.Unsubscribe);
            Broker.Router.Remove(subscription);
            subscription.Held = false; // a cluster resume waiting for it lets it go
            _usage?.RemoveSubscription(subscription.Pattern);
            Volatile.Write(ref _subscriptionCount, _subscriptions.Count);
            _interestChanged = true;
        }

        return default;
    }

    /// <summary>
    /// Cluster: this session changed its subscriptions and Redis does not have every change yet. The transport
    /// answers the client's next question (a PONG, a long-poll response) only after
    /// <see cref="InterestSettledAsync"/>, so a subscription the client was told of is live on every node.
    /// One test of a field on a single node. Caller: the session's input (one at a time).
    /// </summary>
    public bool AwaitsInterest => (_interestChanged && !Broker.Interest.IsSettled) || _resumes is { IsCompleted: false } || _joins is { IsCompleted: false };

    /// <summary>Completes when every subscription change made so far is in Redis (at once on a single node), every cluster resume has queued its replay, and every join is decided.</summary>
    public async Task InterestSettledAsync()
    {
        _interestChanged = false;
        await Broker.Interest.WhenSettledAsync().ConfigureAwait(false);

        if (_resumes is { } resumes)
        {
            await resumes.ConfigureAwait(false);
        }

        if (_joins is { } joins)
        {
            await joins.ConfigureAwait(false); // a member's join is decided before the client is answered (spec §15.5)
        }
    }

    /// <summary>Charges one SUBSCRIBE or UNSUBSCRIBE to the subscription-change rate: <c>true</c> for the first over it in an episode.</summary>
    private bool TakeSubscriptionToken() =>
        Limits.SubscriptionRatePerSecond > 0 && _subscriptionChanges.Take(Limits.SubscriptionRatePerSecond, Limits.SubscriptionBurst);

    /// <summary>
    /// A subscription change's answer: its own refusal wins over the rate notice, which then goes to the next
    /// change over the rate; else the RateLimited notice (the change was made), once per episode.
    /// </summary>
    private Refusal Answer(bool overRate, Refusal answer)
    {
        if (!answer.IsNone || !overRate)
        {
            if (overRate)
            {
                _subscriptionChanges.Unwarn();
            }

            return answer;
        }

        int rate = Limits.SubscriptionRatePerSecond;
        return Refuse(ErrorCode.RateLimited, $"Changing subscriptions faster than {rate} per second (burst {Limits.SubscriptionBurst}): input is paused to hold that rate; the change was made.");
    }
}
