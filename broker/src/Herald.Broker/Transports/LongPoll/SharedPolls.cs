using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.Engines.PollSharing;
using Herald.Broker.Sessions;
using Microsoft.AspNetCore.Http;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// Polls of shared sessions (spec cluster.md §10), on any node: each reads the session's shared backlog, not this
/// node's memory, and takes the session over when it finds its owner gone.
/// </summary>
internal sealed class SharedPolls(PollSessionStore store, SessionRegistry registry, SessionTakeover takeover)
{
    /// <summary>
    /// A poll of a shared session (spec cluster.md §10), on any node: acknowledges and reads the session's stream
    /// in Redis; with nothing there, holds until the owner appends (it wakes this node), a newer poll replaces this
    /// one (409), the session ends (410) or the poll timeout passes (an empty take). A poll held on a node that is
    /// not the owner looks at the owner's lease every heartbeat, and takes the session over once it has expired.
    /// </summary>
    public async Task<WindowTake> PollAsync(PollSessionStore.Located at, string token, long ack, CancellationToken cancellation)
    {
        try
        {
            return await ReadAsync(at, token, ack, cancellation).ConfigureAwait(false);
        }
        finally
        {
            at.Local?.Touch(); // the owner counts its own polls (their end too) as they come; Redis tells it of the others'
        }
    }

    private async Task<WindowTake> ReadAsync(PollSessionStore.Located at, string token, long ack, CancellationToken cancellation)
    {
        ISharedSessions shared = store.Shared;
        long deadline = Environment.TickCount64 + (long)store.Options.PollTimeout.TotalMilliseconds;
        string? generation = null;
        while (true)
        {
            using ISessionWake wake = shared.Arm(token);
            SharedPoll read = await PollProblems.OrUnavailable(shared.PollAsync(token, ack, store.Options.MaxMessagesPerPoll, store.Options.MaxBytesPerPoll, PollSession.StateTimeToLiveOf(store.Options, shared), hold: true, generation)).ConfigureAwait(false);

            switch (read.Status)
            {
                case SharedPollStatus.Unknown:
                    throw PollProblems.SessionNotFound();
                case SharedPollStatus.Ended:
                    store.Broker.Metrics.Poll("ended");
                    throw PollProblems.Ended(read.Reason ?? "");
                case SharedPollStatus.AckOutOfRange:
                    throw HttpProblem.Malformed($"ack {ack} is not between 0 and the last sequence assigned, {read.LastSequence}.");
                case SharedPollStatus.Replaced:
                    store.Broker.Metrics.Poll("replaced");
                    throw new HttpProblem(StatusCodes.Status409Conflict, "PollReplaced", "A newer poll on this session took over.");
            }

            generation = read.Generation;

            // Loss marks alone that a poll took before are held as nothing would be, then answered: a client never spins on them.
            bool marksTakenBefore = read.Entries.Count > 0 && read.Entries.All(e => e.Sid == LossMark.Sid) && read.Entries[^1].Sequence <= read.HighestSent;
            if (read.Entries.Count > 0 && !marksTakenBefore)
            {
                store.Broker.Metrics.Poll("messages");
                return TakeOf(read, ack);
            }

            long remaining = deadline - Environment.TickCount64;
            if (remaining <= 0 || cancellation.IsCancellationRequested || registry.IsStopping)
            {
                if (!registry.IsStopping)
                {
                    await UnholdAsync(shared, token, read.Generation!).ConfigureAwait(false); // stopping: the answer goes at once, and the waiter expires
                }

                store.Broker.Metrics.Poll("empty");
                return marksTakenBefore && !cancellation.IsCancellationRequested ? TakeOf(read, ack) : WindowTake.Empty(ack);
            }

            bool woken = await wake.WaitAsync(TimeSpan.FromMilliseconds(Math.Min(remaining, (long)shared.RenewEvery.TotalMilliseconds)), cancellation).ConfigureAwait(false);
            if (!woken && !cancellation.IsCancellationRequested && store.Find(token) is null)
            {
                SharedSession? record = await PollProblems.OrUnavailable(shared.FindAsync(token)).ConfigureAwait(false);
                if (record is { Owner: null, Ended: null })
                {
                    await takeover.RunAsync(record, at.Identity!, null).ConfigureAwait(false); // the owner is gone: messages flow again from here
                }
            }
        }
    }

    /// <summary>
    /// A held poll answered without a message holds no more: the owner, which reads "a poll is held" from Redis, must not
    /// take the session for polled (and so never idle) after its client went away. A failure leaves it to the waiter's
    /// own expiry (a lease after its last read).
    /// </summary>
    private static async Task UnholdAsync(ISharedSessions shared, string token, string generation)
    {
        try
        {
            await shared.UnholdAsync(token, generation).ConfigureAwait(false);
        }
        catch (Exception e) when (e is ClusterUnavailableException or ObjectDisposedException)
        {
            // the owner stops counting the poll as held a lease after its last read
        }
    }

    /// <summary>
    /// The consecutive messages read, within <c>MaxBytesPerPoll</c> (at least one), after the loss marks that lead
    /// (reported in the take, as a local window's are); a gap (dropped by the owner's backlog, or an entry left out
    /// as not a node's) or a later mark ends the take, and the next poll reports it.
    /// </summary>
    private WindowTake TakeOf(SharedPoll read, long ack)
    {
        var frames = new List<QueuedFrame>(read.Entries.Count);
        long bytes = 0;
        long dropped = Math.Max(0, read.Entries[0].Sequence - 1 - Math.Max(read.HighestAck, ack));
        LossMark loss = LossMark.None;
        int at = 0;
        for (long next = read.Entries[0].Sequence; at < read.Entries.Count && read.Entries[at] is { Sid: LossMark.Sid } mark && mark.Sequence == next; at++, next++)
        {
            loss = loss.Merge(LossMark.Read(mark.Frame.Span));
        }

        long first = at == 0 ? read.Entries[0].Sequence : read.Entries[at - 1].Sequence + 1;
        for (; at < read.Entries.Count; at++)
        {
            (long sequence, uint sid, MessageBuffer frame) = read.Entries[at];
            if (sequence != first + frames.Count || sid == LossMark.Sid || (frames.Count > 0 && bytes + frame.Length > store.Options.MaxBytesPerPoll))
            {
                break;
            }

            frames.Add(new QueuedFrame(frame, sid)); // not copied, not one per session: what the node read or kept is never written to
            bytes += frame.Length;
        }

        bool redelivery = first <= read.HighestSent;
        if (redelivery)
        {
            store.Broker.Metrics.Redelivered();
        }

        return new WindowTake(first, [.. frames], bytes, dropped + loss.Dropped, redelivery) { Gaps = loss.Gaps };
    }
}
