using System.Buffers;
using System.Globalization;
using System.Net;
using System.Text;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.Engines.PollSharing;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// The takeover of a shared session whose owner is gone (spec cluster.md §10): this node takes its lease, holds it
/// in the store, and makes its subscriptions again in this node's router; from then on this node is its owner.
/// </summary>
internal sealed class SessionTakeover(PollSessionStore store, SessionRegistry registry)
{
    /// <summary>
    /// Takes over a shared session whose owner's lease expired (spec cluster.md §10): opened here as its identity,
    /// its subscriptions made again, each on a history topic resumed after the last position it delivered, and its
    /// sequence continued. Every subscription that is not resumed may have lost what was published while nobody held it:
    /// a loss mark naming them (<see cref="LossMark"/>, how many unknown) is appended first, at the next sequence, so
    /// the next poll through any node reports them (longpoll §2). Null if another node was first (or it ended meanwhile).
    /// </summary>
    public async Task<PollSession?> RunAsync(SharedSession record, Identity identity, EndPoint? remote)
    {
        ISharedSessions shared = store.Shared;
        if (registry.IsStopping)
        {
            return null; // a node on its way out takes nothing over: its polls read Redis, the next node takes it
        }

        SharedSession? taken = await PollProblems.OrUnavailable(shared.TakeOverAsync(record.Token)).ConfigureAwait(false);
        if (taken is null)
        {
            return store.Find(record.Token);
        }

        bool headers = ((Capabilities)taken.Capabilities & Capabilities.Headers) != 0; // as Open grants them
        StreamPosition?[] resumes = [.. taken.Subscriptions.Select(s => ResumeOf(s, headers))];
        uint[] gaps = [.. taken.Subscriptions.Where((s, i) => resumes[i] is null).Select(s => s.Sid)];
        var session = new PollSession(store.Broker, store, store.Options, taken.Token, registry.NextId(), remote, store.Budget, shared: shared, baseSequence: taken.Sequence + (gaps.Length > 0 ? 1 : 0));
        session.Open(identity, taken.Client, (Capabilities)taken.Capabilities);
        session.HelloInfo = taken.Info; // its members join again with the info it was created with
        Refusal refused = store.Hold(session);
        if (!refused.IsNone)
        {
            // This node cannot hold it (its connection limits, or it began stopping): let go, for another node to take.
            session.Moved();
            await shared.ReleaseAsync(taken.Token).ConfigureAwait(false);
            throw HttpProblem.Unavailable(refused.Code == ErrorCode.ShuttingDown ? "OwnerUnavailable" : refused.Code.ToString(), refused.Message!, 1);
        }

        await session.Requests.WaitAsync().ConfigureAwait(false);
        try
        {
            if (gaps.Length > 0)
            {
                var mark = new SharedEntry(taken.Sequence + 1, LossMark.Sid, new LossMark(0, gaps).ToBytes(), null);
                _ = await shared.AppendAsync(taken.Token, [mark], store.Options.MaxPendingMessagesPerSession, session.Backlog.Limits.MaxBytes, store.Options.SlowConsumerPolicy == SlowConsumerPolicy.Disconnect, session.StateTimeToLive).ConfigureAwait(false);
            }

            for (int i = 0; i < taken.Subscriptions.Count; i++)
            {
                SharedSubscription subscription = taken.Subscriptions[i];
                StreamPosition? since = resumes[i];
                Refusal answer;
                try
                {
                    var pattern = new ReadOnlySequence<byte>(Encoding.UTF8.GetBytes(subscription.Pattern));
                    answer = await session.DecidedAsync(() => session.Subscribe(subscription.Sid, pattern, subscription.NoEcho, since, subscription.Queue, subscription.Presence), CancellationToken.None).ConfigureAwait(false);
                }
                catch (ProtocolException e)
                {
                    answer = new Refusal(e.Code, e.Message);
                }

                if (!answer.IsNone && answer.Code != ErrorCode.RateLimited)
                {
                    _ = await shared.SubscriptionAsync(taken.Token, subscription.Sid, null, SubscribeOptions.None).ConfigureAwait(false); // no longer allowed: gone
                }
            }

            session.FlushTouched();
            if (session.AwaitsInterest)
            {
                await session.InterestSettledAsync().WaitAsync(store.Options.PollTimeout).ConfigureAwait(false); // what is published after this answer reaches it
            }
        }
        catch (Exception e) when (e is TimeoutException or ClusterUnavailableException { InnerException: TimeoutException })
        {
            // Redis slow to confirm: served anyway; the subscriptions become live when it does.
        }
        finally
        {
            session.Requests.Release();
        }

        store.Broker.Log.SessionTakenOver(session.Id, taken.Subscriptions.Count);
        return session;
    }

    /// <summary>The position a subscription resumes after (a history topic, on a session with headers, spec §13); null: none, it may have lost messages.</summary>
    private static StreamPosition? ResumeOf(SharedSubscription subscription, bool headers) =>
        headers && subscription.Position is { } position && position.IndexOf(' ', StringComparison.Ordinal) is > 0 and var space
            && ulong.TryParse(position.AsSpan(0, space), CultureInfo.InvariantCulture, out ulong offset)
            ? new StreamPosition(offset, position[(space + 1)..])
            : null;
}
