using System.Collections.Concurrent;
using System.Globalization;

namespace Herald.Broker.Security;

/// <summary>An identity (a static token's name, or a JWT's <c>sub</c>) the server API revoked until <see cref="Until"/>, and why.</summary>
internal sealed record Revocation(string Identity, DateTimeOffset Until, string Reason)
{
    /// <summary>What a refused client is told (spec §8 <c>Revoked</c>): the identity, until when, and the reason the backend gave.</summary>
    public string Message => string.Create(CultureInfo.InvariantCulture, $"'{Identity}' is revoked until {Until:yyyy-MM-ddTHH:mm:ssZ}{(Reason.Length > 0 ? ": " + Reason : ".")}");
}

/// <summary>
/// The identities refused until a time (spec §8 <c>Revoked</c>): HELLO, a credential refresh, a long-poll session's creation,
/// an SSE or WebSocket connect and every bearer-authenticated HTTP request are refused while their identity is here. At most
/// <c>Herald:Security:MaxRevocations</c> entries: an entry is dropped once its time has passed (when it is looked up, or when
/// the table is full and another is added); a revocation past the bound is refused, never an older one forgotten. The clock is
/// the host's <see cref="TimeProvider"/>. Filled by the client-control engine: on a single node by the server API's actions, in a
/// cluster from Redis as well (every node's, and those made before this node started). Thread-safe; looked up only when a
/// client authenticates, never per message.
/// </summary>
internal sealed class Revocations(int max, TimeProvider time)
{
    private readonly ConcurrentDictionary<string, Revocation> _entries = new(StringComparer.Ordinal);

    /// <summary>The most entries the table holds (<c>Herald:Security:MaxRevocations</c>).</summary>
    public int Max => max;

    /// <summary>Entries held now, expired ones not yet dropped included.</summary>
    public int Count => _entries.Count;

    /// <summary>The clock revocations expire by.</summary>
    public DateTimeOffset Now => time.GetUtcNow();

    /// <summary>The revocation of <paramref name="identity"/> in force now, or null (an expired one is dropped here).</summary>
    public Revocation? Find(string identity)
    {
        if (_entries.IsEmpty || !_entries.TryGetValue(identity, out Revocation? found))
        {
            return null;
        }

        if (found.Until > time.GetUtcNow())
        {
            return found;
        }

        _entries.TryRemove(new KeyValuePair<string, Revocation>(identity, found));
        return null;
    }

    /// <summary>
    /// Adds or replaces <paramref name="revocation"/> (a later one for the same identity replaces it, an earlier <c>Until</c>
    /// too: the backend's last word holds). False when the table holds <see cref="Max"/> entries in force and this identity is
    /// not one of them; an already expired revocation is not kept (true: nothing to refuse).
    /// </summary>
    public bool Set(Revocation revocation)
    {
        if (revocation.Until <= time.GetUtcNow())
        {
            Remove(revocation.Identity);
            return true;
        }

        if (!_entries.ContainsKey(revocation.Identity) && _entries.Count >= max)
        {
            DropExpired();
            if (_entries.Count >= max)
            {
                return false;
            }
        }

        _entries[revocation.Identity] = revocation;
        return true;
    }

    /// <summary>Lifts <paramref name="identity"/>'s revocation; false when there was none.</summary>
    public bool Remove(string identity) => _entries.TryRemove(identity, out _);

    /// <summary>The revocations in force now (the server API's listing), earliest end first.</summary>
    public IReadOnlyList<Revocation> InForce()
    {
        DateTimeOffset now = time.GetUtcNow();
        return [.. _entries.Values.Where(r => r.Until > now).OrderBy(r => r.Until)];
    }

    /// <summary>Drops every entry whose time has passed.</summary>
    public void DropExpired()
    {
        DateTimeOffset now = time.GetUtcNow();
        foreach (KeyValuePair<string, Revocation> entry in _entries)
        {
            if (entry.Value.Until <= now)
            {
                _entries.TryRemove(entry);
            }
        }
    }
}
