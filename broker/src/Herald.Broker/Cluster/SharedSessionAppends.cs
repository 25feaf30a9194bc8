using System.Collections.Concurrent;
using System.Globalization;
using System.Runtime.CompilerServices;
using System.Security.Cryptography;
using System.Text;
using Herald.Broker.Engines.PollSharing;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The appends of a node's shared long-poll sessions (spec cluster.md §10), gathered: the appends of all its sessions
/// waiting at a moment go to Redis together, in one script per shard (<see cref="SharedSessionScripts.Append"/>; at most
/// <see cref="MaxSessionsPerAppend"/> sessions and about <see cref="MaxBytesPerAppend"/> bytes of frames; a call starts when
/// none is in flight, or when a full call's worth waits, at most <see cref="MaxAppendsInFlight"/> in flight), and each frame goes once per call, whatever the number of
/// sessions it goes to: the router hands every session that gets a message the same buffer, so frames are told apart
/// by their memory, never compared. A frame an earlier call still in flight wrote is referenced where that call wrote it
/// (if it is still there when this one runs), so the sessions of one message share one copy however their appends were
/// gathered; the call that waited for an answer is built before the answered call's sessions are told, so it refers to
/// what that call wrote too. Told apart by memory only while a call that wrote or referenced the frame is in flight or
/// being answered: its sessions hold the buffer meanwhile, so the same memory is the same message. A session's pump has one append in flight at a time,
/// so its order holds. Once Redis has a call's frames, <paramref name="kept"/> keeps them for this node's polls, and
/// <paramref name="entries"/> what each session was appended; then each session's poll held on this node is woken
/// (<paramref name="woken"/>: the script wakes only other nodes' polls, so this node's find what it appended known).
/// </summary>
internal sealed class SharedSessionAppends(ClusterShards shards, string node, TimeSpan lease, string? secret, KeptFrames kept, KeptEntries entries, Action<string> woken)
{
    /// <summary>Calls to Redis with appends in flight at once, at most: while they are out, the next appends gather into one.</summary>
    private const int MaxAppendsInFlight = 4;

    /// <summary>Sessions in one append call, at most; and about this many bytes of frames.</summary>
    private const int MaxSessionsPerAppend = 256;

    private const long MaxBytesPerAppend = 4 * 1024 * 1024;

    private readonly ConcurrentQueue<PendingAppend> _appends = new();
    private readonly Dictionary<ReadOnlyMemory<byte>, Written> _written = [];
    private int _inFlight;
    private int _waiting;
    private long _waitingBytes;
    private long _calls;
    private int _unanswered;

    /// <summary>Appends handed in and not yet answered, gathered or in a call (tests hold a paused Redis until this many are).</summary>
    internal int Unanswered => Volatile.Read(ref _unanswered);

    /// <summary>
    /// Appends a session's messages, its stream bounded in messages and bytes; returns messages dropped (DropOldest), -1
    /// lease lost or session ended, -2 ended as a slow consumer. The entries' frames must stay as they are until it completes.
    /// </summary>
    public Task<long> AppendAsync(string token, IReadOnlyList<SharedEntry> entries, int maxPending, long maxPendingBytes, bool disconnect, TimeSpan ttl)
    {
        long bytes = 0;
        foreach (SharedEntry entry in entries)
        {
            bytes += entry.Frame.Length;
        }

        var append = new PendingAppend(token, entries, maxPending, maxPendingBytes, disconnect, (long)ttl.TotalMilliseconds, bytes);
        Interlocked.Increment(ref _unanswered);
        Interlocked.Increment(ref _waiting);
        Interlocked.Add(ref _waitingBytes, bytes);
        _appends.Enqueue(append);
        Send();
        return append.Done.Task;
    }

    /// <summary>
    /// Sends what waits: at once when no call is in flight; while one is, only a full call's worth (more calls would each
    /// carry a few sessions and their frames again: what waits goes in the next call, once the one in flight is answered).
    /// Called after every enqueue and every answer, so nothing waits with no call in flight.
    /// </summary>
    private void Send()
    {
        while (!_appends.IsEmpty)
        {
            int inFlight = Volatile.Read(ref _inFlight);
            if (inFlight >= MaxAppendsInFlight || (inFlight > 0 && Volatile.Read(ref _waiting) < MaxSessionsPerAppend && Interlocked.Read(ref _waitingBytes) < MaxBytesPerAppend))
            {
                return; // an answer sends it
            }

            if (Interlocked.CompareExchange(ref _inFlight, inFlight + 1, inFlight) != inFlight)
            {
                continue;
            }

            var batch = new List<PendingAppend>();
            long bytes = 0;
            while (batch.Count < MaxSessionsPerAppend && bytes < MaxBytesPerAppend && _appends.TryDequeue(out PendingAppend? next))
            {
                batch.Add(next);
                bytes += next.Bytes;
                Interlocked.Decrement(ref _waiting);
                Interlocked.Add(ref _waitingBytes, -next.Bytes);
            }

            if (batch.Count == 0)
            {
                Interlocked.Decrement(ref _inFlight);
                continue;
            }

            _ = SendAsync(batch);
        }
    }

    /// <summary>A batch's calls, one per shard its sessions are on; the last one answered frees the batch's room in flight (<see cref="Answered"/>).</summary>
    private Task SendAsync(List<PendingAppend> batch)
    {
        if (shards.Count == 1)
        {
            return SendAsync(shards.First, batch, new StrongBox<int>(1));
        }

        List<IGrouping<ClusterConnection, PendingAppend>> groups = [.. batch.GroupBy(append => shards.For(append.Token))];
        var left = new StrongBox<int>(groups.Count);
        return Task.WhenAll(groups.Select(group => SendAsync(group.Key, [.. group], left)));
    }

    /// <summary>
    /// One of a batch's calls is answered (or failed): the last frees the batch's room in flight and sends what waits
    /// <b>before</b> the answered call's sessions let go of their frames, so that the next call, gathered meanwhile, refers
    /// to the frames Redis now has (the same memory is still the same message) instead of writing them again.
    /// </summary>
    private void Answered(StrongBox<int> left)
    {
        if (Interlocked.Decrement(ref left.Value) == 0)
        {
            Interlocked.Decrement(ref _inFlight);
            Send();
        }
    }

    /// <summary>
    /// One call: the distinct frames of <paramref name="batch"/> once, numbered from 1, then each session's messages by
    /// number. Frames are numbered in the order the sessions' messages follow one another (<see cref="Number"/>), so a
    /// session's batch of one topic is a run of consecutive numbers however the sessions' batches overlap: a range entry,
    /// with no walk over its messages in the script.
    /// </summary>
    private async Task SendAsync(ClusterConnection shard, List<PendingAppend> batch, StrongBox<int> left)
    {
        var used = new List<(ReadOnlyMemory<byte> Frame, Written Where)>();
        bool answered = false;
        try
        {
            using EnvelopeSigner? signer = secret is null ? null : new EnvelopeSigner(secret);
            (List<ReadOnlyMemory<byte>> distinct, int[] number, int[] order) = Number(batch);
            var frames = new List<byte[]>(distinct.Count);
            var hashes = new List<byte[]>(signer is null ? 0 : distinct.Count);
            foreach (ReadOnlyMemory<byte> frame in distinct)
            {
                frames.Add(frame.ToArray()); // the one copy: the session's buffer is released once this call is answered, maybe before Redis has it
                if (signer is not null)
                {
                    hashes.Add(SHA256.HashData(frame.Span));
                }
            }

            var keys = new RedisKey[1 + (3 * batch.Count)];
            keys[0] = SharedSessionKeys.Frames(shard, node, Interlocked.Increment(ref _calls));
            var sessions = new List<RedisValue>(11 * batch.Count);
            var numbering = new (int[]? Numbers, int First)[batch.Count];
            long ttl = 0;
            int at = 0;
            var list = new StringBuilder();
            for (int s = 0; s < batch.Count; s++)
            {
                PendingAppend append = batch[s];
                IReadOnlyList<SharedEntry> appended = append.Entries;
                keys[(3 * s) + 1] = SharedSessionKeys.Hash(shard, append.Token);
                keys[(3 * s) + 2] = SharedSessionKeys.Stream(shard, append.Token);
                keys[(3 * s) + 3] = SharedSessionKeys.Lease(shard, append.Token);
                ttl = Math.Max(ttl, append.TtlMs);
                byte[] tags = signer is null ? [] : new byte[SessionSignatures.TagSize * appended.Count];
                Dictionary<uint, string>? positions = null;
                bool uniform = true, consecutive = true;
                int firstNumber = appended.Count == 0 ? 0 : number[order[at]];
                for (int i = 0; i < appended.Count; i++)
                {
                    SharedEntry entry = appended[i];
                    int n = number[order[at + i]];
                    uniform &= entry.Sid == appended[0].Sid;
                    consecutive &= n == firstNumber + i;
                    if (signer is not null)
                    {
                        SessionSignatures.TagEntry(signer, append.Token, entry.Sequence, entry.Sid, hashes[n - 1], tags.AsSpan(i * SessionSignatures.TagSize, SessionSignatures.TagSize));
                    }

                    if (entry.Position is { } position)
                    {
                        (positions ??= [])[entry.Sid] = position; // the last one each sid appends
                    }
                }

                int[]? numbers = null;
                if (!consecutive)
                {
                    numbers = new int[appended.Count];
                    for (int i = 0; i < numbers.Length; i++)
                    {
                        numbers[i] = number[order[at + i]];
                    }
                }

                at += appended.Count;
                numbering[s] = (numbers, firstNumber); // what this node keeps of the append (KeptEntries)
                sessions.Add(append.Token);
                sessions.Add(append.TtlMs);
                sessions.Add(append.MaxPending);
                sessions.Add(append.MaxPendingBytes);
                sessions.Add(append.Disconnect ? 1 : 0);
                sessions.Add(appended.Count == 0 ? 0 : appended[0].Sequence);
                sessions.Add(appended.Count);
                // One sid for all ("*<sid>") and frames numbered consecutively ("=<first>"): the script writes the batch as
                // one range entry per frame hash it lands in, with no walk over its messages (SharedSessionScripts.Append).
                sessions.Add(uniform && appended.Count > 0 ? "*" + appended[0].Sid.ToString(CultureInfo.InvariantCulture) : Joined(list, appended.Count, i => appended[i].Sid));
                sessions.Add(numbers is null && appended.Count > 0 ? "=" + firstNumber.ToString(CultureInfo.InvariantCulture) : Joined(list, numbers!.Length, i => (uint)numbers[i]));
                sessions.Add(tags);
                sessions.Add(appended.Count == 0 || entries.Renews(append.Token, appended[0].Sequence, lease / 3) ? 1 : 0);
                sessions.Add(positions?.Count ?? 0);
                foreach ((uint sid, string position) in positions ?? [])
                {
                    sessions.Add(sid);
                    sessions.Add(position);
                }
            }

            var args = new List<RedisValue>(4 + (3 * frames.Count) + sessions.Count) { node, (long)lease.TotalMilliseconds, ttl, frames.Count };
            lock (_written)
            {
                for (int f = 0; f < frames.Count; f++)
                {
                    args.Add(frames[f]);
                    if (_written.TryGetValue(distinct[f], out Written? earlier) && earlier.Shard == shard)
                    {
                        earlier.Users++;
                        used.Add((distinct[f], earlier));
                        args.Add(earlier.Frames);
                        args.Add(earlier.Field);
                    }
                    else
                    {
                        if (earlier is null)
                        {
                            var written = new Written(shard, (string)keys[0]!, f + 1) { Users = 1 };
                            _written[distinct[f]] = written;
                            used.Add((distinct[f], written));
                        }

                        args.Add(RedisValue.EmptyString);
                        args.Add(RedisValue.EmptyString);
                    }
                }
            }

            args.AddRange(sessions);
            var results = (RedisResult[])(await shard.Database.ScriptEvaluateAsync(SharedSessionScripts.Append, keys, [.. args]).ConfigureAwait(false))!;
            answered = true;
            Answered(left);
            Forget(used);
            KeptCall call = kept.Keep((string)keys[0]!, [.. frames]);
            for (int s = 0; s < batch.Count; s++)
            {
                PendingAppend append = batch[s];
                long result = (long)results[s];
                if (result >= 0)
                {
                    entries.Appended(append.Token, append.Entries, numbering[s].Numbers, numbering[s].First, call, result, append.MaxPending);
                }
                else
                {
                    entries.Forget(append.Token);
                }

                if (append.Done.TrySetResult(result))
                {
                    Interlocked.Decrement(ref _unanswered);
                }

                woken(append.Token);
            }
        }
        catch (Exception e)
        {
            if (!answered)
            {
                Answered(left);
            }

            Forget(used);
            foreach (PendingAppend append in batch)
            {
                entries.RenewAgain(append.Token);
                if (append.Done.TrySetException(ClusterSharedSessions.Unavailable(e)))
                {
                    Interlocked.Decrement(ref _unanswered);
                }

                woken(append.Token); // Redis may have run it: a poll held here reads again rather than wait for a wake that is not coming
            }
        }
    }

    /// <summary>
    /// The distinct frames of <paramref name="batch"/> (told apart by memory) and their numbers from 1, and per message of
    /// each session in turn the index of its frame among them. The numbers follow the sessions' order: a frame is
    /// numbered right after the one that precedes it in the first session that has both, starting from frames no session
    /// has after another. Sessions of one topic see its messages in one order, so each session's batch, a stretch of that
    /// order, gets consecutive numbers, whichever session first brought each frame into the call (numbering by first
    /// sight would number a later stretch brought by one session before an earlier one brought by the next). Where
    /// sessions disagree (several topics, interleaved differently), the first order seen wins and the others' batches
    /// are numbered as they fall: a list entry, as before.
    /// </summary>
    private static (List<ReadOnlyMemory<byte>> Distinct, int[] Number, int[] Order) Number(List<PendingAppend> batch)
    {
        var index = new Dictionary<ReadOnlyMemory<byte>, int>();
        var distinct = new List<ReadOnlyMemory<byte>>();
        var next = new List<int>();
        var follows = new List<bool>();
        int total = 0;
        foreach (PendingAppend append in batch)
        {
            total += append.Entries.Count;
        }

        int[] order = new int[total];
        int at = 0;
        foreach (PendingAppend append in batch)
        {
            int previous = -1;
            foreach (SharedEntry entry in append.Entries)
            {
                if (!index.TryGetValue(entry.Frame, out int i))
                {
                    i = distinct.Count;
                    index[entry.Frame] = i;
                    distinct.Add(entry.Frame);
                    next.Add(-1);
                    follows.Add(false);
                }

                if (previous >= 0 && next[previous] < 0 && !follows[i] && previous != i)
                {
                    next[previous] = i;
                    follows[i] = true;
                }

                order[at++] = i;
                previous = i;
            }
        }

        int[] number = new int[distinct.Count];
        int numbered = 0;
        for (int pass = 0; pass < 2; pass++)
        {
            for (int i = 0; i < distinct.Count; i++)
            {
                if (number[i] != 0 || (pass == 0 && follows[i]))
                {
                    continue; // numbered, or (first pass) numbered from the frame it follows
                }

                for (int j = i; j >= 0 && number[j] == 0; j = next[j])
                {
                    number[j] = ++numbered; // the second pass: frames only on a cycle of disagreeing orders
                }
            }
        }

        var byNumber = new ReadOnlyMemory<byte>[distinct.Count];
        for (int i = 0; i < distinct.Count; i++)
        {
            byNumber[number[i] - 1] = distinct[i];
        }

        return ([.. byNumber], number, order);
    }

    /// <summary>A comma list of <paramref name="count"/> numbers, built in <paramref name="list"/> (reused across a call's sessions).</summary>
    private static string Joined(StringBuilder list, int count, Func<int, uint> item)
    {
        list.Clear();
        for (int i = 0; i < count; i++)
        {
            list.Append(i == 0 ? "" : ",").Append(item(i).ToString(CultureInfo.InvariantCulture));
        }

        return list.ToString();
    }

    /// <summary>A call is answered: the frames it wrote or referenced are no longer its to vouch for (its sessions release them next).</summary>
    private void Forget(List<(ReadOnlyMemory<byte> Frame, Written Where)> used)
    {
        lock (_written)
        {
            foreach ((ReadOnlyMemory<byte> frame, Written where) in used)
            {
                if (--where.Users == 0 && _written.TryGetValue(frame, out Written? now) && now == where)
                {
                    _written.Remove(frame);
                }
            }

            used.Clear();
        }
    }

    /// <summary>Where a call in flight wrote a frame (its frame hash and field), and how many calls in flight use it there.</summary>
    private sealed record Written(ClusterConnection Shard, string Frames, int Field)
    {
        public int Users { get; set; }
    }

    private sealed record PendingAppend(string Token, IReadOnlyList<SharedEntry> Entries, int MaxPending, long MaxPendingBytes, bool Disconnect, long TtlMs, long Bytes)
    {
        public TaskCompletionSource<long> Done { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
    }
}
