using System.Buffers;
using System.Runtime.InteropServices;

namespace Herald.Broker.Routing;

/// <summary>
/// The reply permissions of one restricted session (spec §10, after NATS's <c>allow_responses</c>): a
/// MESSAGE with a <c>reply_to</c> delivered to the session lets it publish to that reply topic
/// <c>maxMessages</c> times within <c>expires</c>. The router records a permission as it delivers (before
/// the receiver can see the message); the session spends one when it publishes to a topic its permissions
/// do not grant. Bounded: at most <c>maxPermits</c> at once, the oldest dropped first. Expiry is read from
/// the broker's <see cref="TimeProvider"/> (the system clock; a test's fake one makes it exact).
/// </summary>
/// <remarks>
/// Threading: publishers (any thread) call <see cref="Grant"/>, the session's one caller calls
/// <see cref="TryUse"/>; both take <c>_gate</c>, which is this session's alone, held for a dictionary
/// operation. Sessions whose identity may publish everywhere have none, so a delivery to them costs nothing.
/// </remarks>
internal sealed class ReplyPermits
{
    private readonly Lock _gate = new();
    private readonly Dictionary<string, Permit> _permits = new(StringComparer.Ordinal);
    private readonly Dictionary<string, Permit>.AlternateLookup<ReadOnlySpan<char>> _bySpan;
    private readonly Queue<string> _order = new(); // insertion order, for dropping the oldest; may hold used-up names
    private readonly int _maxMessages;
    private readonly long _expires; // in the clock's timestamp units
    private readonly int _maxPermits;
    private readonly TimeProvider _time;

    public ReplyPermits(int maxMessages, TimeSpan expires, int maxPermits, TimeProvider time)
    {
        _maxMessages = maxMessages;
        _time = time;
        _expires = (long)Math.Min(expires.TotalSeconds * time.TimestampFrequency, long.MaxValue / 2); // a grant "forever" does not wrap
        _maxPermits = maxPermits;
        _bySpan = _permits.GetAlternateLookup<ReadOnlySpan<char>>();
    }

    /// <summary>Permissions held now (expired ones included until they are dropped).</summary>
    public int Count
    {
        get
        {
            lock (_gate)
            {
                return _permits.Count;
            }
        }
    }

    /// <summary>A request was delivered with <paramref name="replyTo"/> (checked ASCII): allow its replies, afresh.</summary>
    public void Grant(in ReadOnlySequence<byte> replyTo)
    {
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        using var name = new TopicChars(replyTo, stack);
        var permit = new Permit(_maxMessages, _time.GetTimestamp() + _expires);
        lock (_gate)
        {
            ref Permit slot = ref CollectionsMarshal.GetValueRefOrAddDefault(_bySpan, name.Span, out bool exists);
            slot = permit;
            if (!exists)
            {
                AddedLocked(name.Span);
            }
        }
    }

    /// <summary>Spends one reply to <paramref name="topic"/>; false when none is allowed (never granted, used up or expired).</summary>
    public bool TryUse(ReadOnlySpan<char> topic)
    {
        lock (_gate)
        {
            ref Permit permit = ref CollectionsMarshal.GetValueRefOrNullRef(_bySpan, topic);
            if (System.Runtime.CompilerServices.Unsafe.IsNullRef(ref permit))
            {
                return false;
            }

            bool allowed = _time.GetTimestamp() < permit.ExpiresAt;
            if (!allowed || --permit.Remaining == 0)
            {
                _bySpan.Remove(topic);
            }

            return allowed;
        }
    }

    /// <summary>Keeps the bound after a new name was added: drops the oldest past it. Caller holds <c>_gate</c>.</summary>
    private void AddedLocked(ReadOnlySpan<char> name)
    {
        _bySpan.TryGetValue(name, out string? key, out _);
        _order.Enqueue(key!);
        while (_permits.Count > _maxPermits && _order.TryDequeue(out string? oldest))
        {
            _permits.Remove(oldest);
        }

        if (_order.Count > 2 * _maxPermits)
        {
            // Names whose permission was used up linger in the queue: rebuild it from what is held.
            _order.Clear();
            foreach (string held in _permits.Keys)
            {
                _order.Enqueue(held);
            }
        }
    }

    private record struct Permit(int Remaining, long ExpiresAt);
}
