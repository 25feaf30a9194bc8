using System.Collections.Concurrent;
using Herald.Protocol;

namespace Herald.Broker.Transports;

/// <summary>
/// Why sessions named by a token ended, remembered so a late request is told (long-poll's 410 with the
/// reason), bounded in number (the oldest is forgotten first) and in time.
/// </summary>
/// <remarks>Thread-safe. Tokens end in time order, so the oldest is always at the head of the queue.</remarks>
internal sealed class EndedTokens(int maxCount, TimeSpan memory)
{
    private readonly ConcurrentDictionary<string, ErrorCode> _reasons = new(StringComparer.Ordinal);
    private readonly ConcurrentQueue<(string Token, long At)> _order = new();

    public void Add(string token, ErrorCode reason)
    {
        if (maxCount > 0)
        {
            _reasons[token] = reason;
            _order.Enqueue((token, Environment.TickCount64));
            Forget(long.MinValue);
        }
    }

    public bool TryGet(string token, out ErrorCode reason) => _reasons.TryGetValue(token, out reason);

    /// <summary>Forgets those ended longer ago than the memory (called by a sweep).</summary>
    public void Sweep(long now) => Forget(now - (long)memory.TotalMilliseconds);

    private void Forget(long endedBefore)
    {
        while (_order.TryPeek(out (string Token, long At) oldest) && (_order.Count > maxCount || oldest.At <= endedBefore) && _order.TryDequeue(out oldest))
        {
            _reasons.TryRemove(oldest.Token, out _);
        }
    }
}
