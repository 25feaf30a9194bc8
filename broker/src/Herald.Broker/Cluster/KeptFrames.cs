using System.Collections.Concurrent;
using Herald.Broker.Delivery;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The frames of this node's latest append calls to shared long-poll sessions (spec cluster.md §10), kept once Redis has
/// them so that a poll on this node takes an entry's frames from memory rather than fetching them from the call's frame
/// hash (an <c>HMGET</c> round trip and a copy per frame per session). A frame hash is written by the one call its name
/// numbers and never changed, so a frame kept here is the one Redis holds for as long as an entry names it; what is not
/// kept (calls pushed out by the bound, another node's calls, a session this node took over) is fetched as before.
/// Bounded by <see cref="ClusterOptions.KeptFrameBytes"/>: the oldest call's frames go first (its <see cref="KeptCall"/>
/// then holds none); 0 keeps none.
/// </summary>
internal sealed class KeptFrames(long maxBytes)
{
    private readonly ConcurrentDictionary<string, KeptCall> _calls = new(StringComparer.Ordinal);
    private readonly Queue<(KeptCall Call, long Bytes)> _order = new();
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

    /// <summary>
    /// Keeps the frames one append call wrote into the hash <paramref name="name"/> (field k is <paramref name="frames"/>[k - 1]),
    /// once Redis has them; returns the call, whose <see cref="KeptCall.Frames"/> is null once it is no longer kept (at once
    /// if it alone is past the bound).
    /// </summary>
    public KeptCall Keep(string name, byte[][] frames)
    {
        long bytes = 0;
        foreach (byte[] frame in frames)
        {
            bytes += frame.Length;
        }

        var call = new KeptCall(name, Environment.TickCount64, bytes > maxBytes ? null : frames);
        if (call.Frames is null)
        {
            return call;
        }

        lock (_order)
        {
            while (_bytes + bytes > maxBytes && _order.TryDequeue(out (KeptCall Call, long Bytes) oldest))
            {
                _calls.TryRemove(oldest.Call.Name, out _);
                oldest.Call.Forget();
                _bytes -= oldest.Bytes;
            }

            _calls[name] = call;
            _order.Enqueue((call, bytes));
            _bytes += bytes;
        }

        return call;
    }

    /// <summary>Counts <paramref name="frames"/> a poll took from memory without asking <see cref="Find"/> (the owner's kept entries).</summary>
    public void Took(int frames) => Interlocked.Add(ref _found, frames);

    /// <summary>The frames <paramref name="fields"/> of the hash <paramref name="name"/> if every one is kept; null: fetch them.</summary>
    public RedisValue[]? Find(string name, RedisValue[] fields)
    {
        if (!_calls.TryGetValue(name, out KeptCall? call) || call.Frames is not { } frames)
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

/// <summary>
/// One append call's frames as this node keeps them (<see cref="KeptFrames"/>): its frame hash's name, when Redis had them
/// (<see cref="Environment.TickCount64"/>), and the frames (field k is <see cref="Frames"/>[k - 1]) while they are kept, each
/// also as one <see cref="MessageBuffer"/> over it (<see cref="Buffers"/>) that every poll answering it from memory hands
/// out, whatever the number of sessions; both null once the bound pushed them out, so that what refers to the call does
/// not keep them alive.
/// </summary>
internal sealed class KeptCall(string name, long at, byte[][]? frames)
{
    private byte[][]? _frames = frames;
    private MessageBuffer[]? _buffers = frames is null ? null : Array.ConvertAll(frames, MessageBuffer.Wrap);

    public string Name { get; } = name;

    public long At { get; } = at;

    public byte[][]? Frames => Volatile.Read(ref _frames);

    /// <summary>The frames as buffers (not pooled, never written to: a take's release leaves them as they are).</summary>
    public MessageBuffer[]? Buffers => Volatile.Read(ref _buffers);

    /// <summary>No longer kept: the frames are left to whoever still holds one.</summary>
    public void Forget()
    {
        Volatile.Write(ref _frames, null);
        Volatile.Write(ref _buffers, null);
    }
}
