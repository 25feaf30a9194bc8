using System.Collections.Concurrent;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The frames of this node's latest append calls to shared long-poll sessions (spec cluster.md §10), kept once Redis has
/// them so that a poll on this node takes an entry's frames from memory rather than fetching them from the call's frame
/// hash (an <c>HMGET</c> round trip and a copy per frame per session). A frame hash is written by the one call its name
/// numbers and never changed, so a frame kept here is the one Redis holds for as long as an entry names it; what is not
/// kept (calls pushed out by the bound, another node's calls, a session this node took over) is fetched as before.
/// Bounded by <see cref="ClusterOptions.KeptFrameBytes"/>: the oldest call's frames go first; 0 keeps none.
/// </summary>
internal sealed class KeptFrames(long maxBytes)
{
    private readonly ConcurrentDictionary<string, RedisValue[]> _calls = new(StringComparer.Ordinal);
    private readonly Queue<(string Name, long Bytes)> _order = new();
    private long _bytes;
    private long _found;
    private long _fetched;

    /// <summary>Frames a poll on this node took from memory (monitoring, tests).</summary>
    public long Found => Interlocked.Read(ref _found);

    /// <summary>Frames a poll on this node fetched from Redis (monitoring, tests).</summary>
    public long Fetched => Interlocked.Read(ref _fetched);

    /// <summary>Bytes of frames kept now.</summary>
    public long Bytes
    {
        get
        {
            lock (_order)
            {
                return _bytes;
            }
        }
    }

    /// <summary>Keeps the frames one append call wrote into the hash <paramref name="name"/> (field k is <paramref name="frames"/>[k - 1]), once Redis has them.</summary>
    public void Keep(string name, RedisValue[] frames)
    {
        long bytes = 0;
        foreach (RedisValue frame in frames)
        {
            bytes += ((byte[])frame!).Length;
        }

        if (bytes > maxBytes)
        {
            return;
        }

        lock (_order)
        {
            while (_bytes + bytes > maxBytes && _order.TryDequeue(out (string Name, long Bytes) oldest))
            {
                _calls.TryRemove(oldest.Name, out _);
                _bytes -= oldest.Bytes;
            }

            _calls[name] = frames;
            _order.Enqueue((name, bytes));
            _bytes += bytes;
        }
    }

    /// <summary>The frames <paramref name="fields"/> of the hash <paramref name="name"/> if every one is kept; null: fetch them.</summary>
    public RedisValue[]? Find(string name, RedisValue[] fields)
    {
        if (!_calls.TryGetValue(name, out RedisValue[]? frames))
        {
            Interlocked.Add(ref _fetched, fields.Length);
            return null;
        }

        var found = new RedisValue[fields.Length];
        for (int k = 0; k < fields.Length; k++)
        {
            if (!fields[k].TryParse(out long field) || field < 1 || field > frames.Length)
            {
                Interlocked.Add(ref _fetched, fields.Length);
                return null;
            }

            found[k] = frames[field - 1];
        }

        Interlocked.Add(ref _found, fields.Length);
        return found;
    }
}
