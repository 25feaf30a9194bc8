using System.Collections.Concurrent;
using System.Globalization;
using Herald.Broker.Delivery;
using Herald.Broker.Engines.PollSharing;

namespace Herald.Broker.Cluster;

/// <summary>
/// What this node appended to each shared long-poll session it owns (spec cluster.md §10), kept as it appended it (per
/// append: its first sequence, sids and frame numbers in the append call's <see cref="KeptCall"/>), so that a poll on the
/// owner is answered from memory and its script reads no stream: it only checks that the session's stream starts where
/// this node's memory says and holds nothing this node does not know (<see cref="SharedSessionScripts.Poll"/>'s plan).
/// A poll through another node, after a takeover, or for sequences no longer kept reads Redis as before.
/// <para>
/// Bounded per session by its own <c>MaxPendingMessagesPerSession</c> (past it the oldest appends are forgotten here, not
/// in Redis), and it pins no frame: an append's frames are the <see cref="KeptFrames"/>' own (their bound pushes them out,
/// and what refers to them then reads Redis). An append the session's limits dropped from, one out of sequence, and a
/// call older than half the session state's lifetime (whose frame hash a poll here would not renew) start it afresh.
/// </para>
/// <para>
/// It also says when an append renews the session's lease and state expiries (<see cref="Renews"/>): its first on this
/// node, then once a heartbeat, not each append.
/// </para>
/// </summary>
internal sealed class KeptEntries
{
    private readonly ConcurrentDictionary<string, Session> _sessions = new(StringComparer.Ordinal);
    private long _messages;
    private long _appends;
    private long _bytes;
    private long _answered;

    /// <summary>Messages kept now, over all sessions (monitoring, tests).</summary>
    public long Messages => Interlocked.Read(ref _messages);

    /// <summary>Appends kept now, over all sessions (monitoring).</summary>
    public long Appends => Interlocked.Read(ref _appends);

    /// <summary>
    /// Bytes of what is kept now, over all sessions (monitoring): per append its record and queue slot
    /// (<see cref="Run.Bytes"/>), and its sids and frame numbers where they are not one sid and consecutive numbers; no frame.
    /// </summary>
    public long Bytes => Interlocked.Read(ref _bytes);

    /// <summary>Polls answered from memory, their script having read no stream (monitoring, tests).</summary>
    public long Answered => Interlocked.Read(ref _answered);

    /// <summary>Sessions with something kept (tests).</summary>
    public int Sessions => _sessions.Count;

    /// <summary>Messages kept for the session <paramref name="token"/> (tests).</summary>
    public int MessagesOf(string token)
    {
        if (!_sessions.TryGetValue(token, out Session? session))
        {
            return 0;
        }

        lock (session)
        {
            return session.Count;
        }
    }

    /// <summary>
    /// Redis has the session's append of <paramref name="entries"/> (their frames numbered <paramref name="numbers"/> in
    /// <paramref name="call"/>: null, consecutive from <paramref name="firstNumber"/>), of which the script dropped
    /// <paramref name="dropped"/> of the session's oldest; at most <paramref name="maxPending"/> messages are kept.
    /// </summary>
    public void Appended(string token, IReadOnlyList<SharedEntry> entries, int[]? numbers, int firstNumber, KeptCall call, long dropped, int maxPending)
    {
        if (entries.Count == 0)
        {
            return;
        }

        long first = entries[0].Sequence, last = first + entries.Count - 1;
        Session session = _sessions.GetOrAdd(token, _ => new Session(first));
        lock (session)
        {
            if (last <= session.Top)
            {
                return; // an append tried again that Redis had the first time
            }

            if (dropped != 0 || first != session.Top + 1 || call.Buffers is null)
            {
                Clear(session, last); // what Redis dropped is not known here
                return;
            }

            uint sid = entries[0].Sid;
            uint[]? sids = null;
            for (int i = 1; i < entries.Count && sids is null; i++)
            {
                if (entries[i].Sid != sid)
                {
                    sids = [.. entries.Select(e => e.Sid)];
                }
            }

            var run = new Run(first, entries.Count, sid, sids, firstNumber, numbers, call);
            session.Runs.Enqueue(run);
            session.Top = last;
            session.Count += entries.Count;
            session.Bytes += run.Bytes;
            Interlocked.Add(ref _messages, entries.Count);
            Interlocked.Increment(ref _appends);
            Interlocked.Add(ref _bytes, run.Bytes);
            while (session.Count > maxPending && session.Runs.Count > 0)
            {
                Drop(session);
            }
        }
    }

    /// <summary>
    /// Whether an append of the session (from <paramref name="first"/>) renews its lease's and state's expiry: its first here,
    /// then at most once each <paramref name="every"/> (the lease lasts three heartbeats and is renewed each heartbeat as well).
    /// </summary>
    public bool Renews(string token, long first, TimeSpan every)
    {
        Session session = _sessions.GetOrAdd(token, _ => new Session(first));
        long now = Environment.TickCount64;
        lock (session)
        {
            if (session.RenewedAt != 0 && now - session.RenewedAt < (long)every.TotalMilliseconds)
            {
                return false;
            }

            session.RenewedAt = now;
            return true;
        }
    }

    /// <summary>An append that renewed the session's expiries may not have reached Redis: the next one renews them.</summary>
    public void RenewAgain(string token)
    {
        if (_sessions.TryGetValue(token, out Session? session))
        {
            lock (session)
            {
                session.RenewedAt = 0;
            }
        }
    }

    /// <summary>
    /// What a poll on this node would answer from memory: the messages above the ack (<paramref name="ack"/>, or the last
    /// sequence this node knows was gone from the stream if higher), within <paramref name="maxMessages"/> and
    /// <paramref name="maxBytes"/> (at least one). Null when memory does not hold where it starts (or its first frame):
    /// the poll reads Redis. Calls older than <paramref name="maxAge"/> are not used.
    /// </summary>
    public Plan? PlanOf(string token, long ack, int maxMessages, long maxBytes, TimeSpan maxAge)
    {
        if (!_sessions.TryGetValue(token, out Session? session))
        {
            return null;
        }

        long oldest = Environment.TickCount64 - (long)maxAge.TotalMilliseconds;
        lock (session)
        {
            long start = Math.Max(ack, session.Gone) + 1;
            if (start < session.From || start > session.Top + 1)
            {
                return null;
            }

            var messages = new List<(long Sequence, uint Sid, MessageBuffer Frame)>();
            long bytes = 0;
            bool marks = true;
            foreach (Run run in session.Runs)
            {
                if (run.First + run.Count <= start)
                {
                    continue;
                }

                MessageBuffer[]? frames = run.Call.At >= oldest ? run.Call.Buffers : null;
                if (frames is null)
                {
                    break; // an answer ends where memory does (a later one reads Redis)
                }

                for (int k = (int)Math.Max(0, start - run.First); k < run.Count; k++)
                {
                    MessageBuffer frame = frames[(run.Numbers is { } numbers ? numbers[k] : run.FirstNumber + k) - 1];
                    if (messages.Count >= maxMessages || (messages.Count > 0 && bytes + frame.Length > maxBytes))
                    {
                        return new Plan(start, messages, marks, session.Top);
                    }

                    uint sid = run.Sids is { } sids ? sids[k] : run.Sid;
                    messages.Add((run.First + k, sid, frame));
                    bytes += frame.Length;
                    marks &= sid == LossMark.Sid;
                }
            }

            return messages.Count == 0 && start <= session.Top ? null : new Plan(start, messages, marks, session.Top);
        }
    }

    /// <summary>The poll's script took <paramref name="plan"/>: its messages are the answer.</summary>
    public List<(long Sequence, uint Sid, MessageBuffer Frame)> Answer(Plan plan)
    {
        Interlocked.Increment(ref _answered);
        return plan.Messages;
    }

    /// <summary>A poll learned from Redis that the session's stream has nothing at or below <paramref name="gone"/>: what it holds there is forgotten.</summary>
    public void Learned(string token, long gone)
    {
        if (!_sessions.TryGetValue(token, out Session? session))
        {
            return;
        }

        lock (session)
        {
            session.Gone = gone; // Redis's, which corrects the guess a new session starts with (the sequence before its first append here)
            while (session.Runs.TryPeek(out Run? run) && run.First + run.Count - 1 <= session.Gone)
            {
                Drop(session);
            }
        }
    }

    /// <summary>The session is no longer this node's (ended, taken over, given up): nothing of it is kept.</summary>
    public void Forget(string token)
    {
        if (_sessions.TryRemove(token, out Session? session))
        {
            lock (session)
            {
                Clear(session, session.Top);
            }
        }
    }

    private void Clear(Session session, long top)
    {
        Interlocked.Add(ref _messages, -session.Count);
        Interlocked.Add(ref _appends, -session.Runs.Count);
        Interlocked.Add(ref _bytes, -session.Bytes);
        session.Runs.Clear();
        session.Count = 0;
        session.Bytes = 0;
        session.Top = top;
        session.From = top + 1;
    }

    private void Drop(Session session)
    {
        Run run = session.Runs.Dequeue();
        session.Count -= run.Count;
        session.Bytes -= run.Bytes;
        Interlocked.Add(ref _messages, -run.Count);
        Interlocked.Decrement(ref _appends);
        Interlocked.Add(ref _bytes, -run.Bytes);
        session.From = run.First + run.Count;
    }

    /// <summary>
    /// A poll's answer from memory: the messages from <see cref="Start"/> (none: nothing above the ack yet), whether they are
    /// only loss marks (then a holding poll waits, as on the stream), and the last sequence this node appended.
    /// </summary>
    internal sealed record Plan(long Start, List<(long Sequence, uint Sid, MessageBuffer Frame)> Messages, bool MarksOnly, long Top)
    {
        /// <summary>The script's argument: "start,end,top,marks" (<see cref="SharedSessionScripts.Poll"/>).</summary>
        public string Argument => string.Create(CultureInfo.InvariantCulture, $"{Start},{Start + Messages.Count - 1},{Top},{(MarksOnly ? 1 : 0)}");
    }

    /// <summary>One append: its messages' first sequence and count, sids (<see cref="Sids"/>, or all <see cref="Sid"/>) and frame numbers in its call.</summary>
    private sealed record Run(long First, int Count, uint Sid, uint[]? Sids, int FirstNumber, int[]? Numbers, KeptCall Call)
    {
        /// <summary>What it holds: the record (header and fields) and its queue slot, then its arrays (header and 4 bytes a message) when it has them.</summary>
        public long Bytes { get; } = 72 + (Sids is null ? 0 : 24 + (4L * Count)) + (Numbers is null ? 0 : 24 + (4L * Count));
    }

    /// <summary>A session's appends kept, from <see cref="From"/> to <see cref="Top"/>; <see cref="Gone"/> the last sequence a poll learned was gone from its stream.</summary>
    private sealed class Session(long first)
    {
        public Queue<Run> Runs { get; } = new();

        public long From { get; set; } = first;

        public long Top { get; set; } = first - 1;

        public long Gone { get; set; } = first - 1;

        public int Count { get; set; }

        /// <summary>Bytes of its appends (<see cref="Run.Bytes"/>).</summary>
        public long Bytes { get; set; }

        /// <summary>When an append last renewed its expiries (<see cref="Environment.TickCount64"/>; 0: never).</summary>
        public long RenewedAt { get; set; }
    }
}
