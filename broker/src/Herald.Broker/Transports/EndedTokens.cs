using System.Collections.Concurrent;
using Herald.Protocol;

namespace Herald.Broker.Transports;

/// <summary>
/// Why sessions named by a token ended, remembered so a late request is told (long-poll's 410 with the
/// reason, and the backend's words when it ended the session: at most 512 characters each), bounded in number (the oldest
/// is forgotten first) and in time.
/// </summary>
/// <remarks>Thread-safe. Tokens end in time order, so the oldest is always at the head of the queue.</remarks>
internal sealed class EndedTokens(int maxCount, TimeSpan memory)
{
    private readonly ConcurrentDictionary<string, (ErrorCode Code, string? Told)> _reasons = new(StringComparer.Ordinal);
    private readonly ConcurrentQueue<(string Token, long At)> _order = new();

    /// <param name="told">What the client was told, kept only when the application's backend ended it (Disconnected, Revoked).</param>
    public void Add(string token, ErrorCode reason, string? told = null)
    {
        if (maxCount > 0)
        {
            _reasons[token] = (reason, reason is ErrorCode.Disconnected or ErrorCode.Revoked && told is not null ? told[..Math.Min(told.Length, 512)] : null);
            _order.Enqueue((token, Environment.TickCount64));
            Forget(long.MinValue);
        }
    }

    public bool TryGet(string token, out ErrorCode reason, out string? told)
    {
        bool found = _reasons.TryGetValue(token, out (ErrorCode Code, string? Told) ended);
        (reason, told) = ended;
        return found;
    }

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
