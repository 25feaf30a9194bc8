using System.Net;
using Herald.Broker.Security;

namespace Herald.Broker.Sessions;

/// <summary>
/// What each identity holds across all its clients, on every transport: clients (TCP connections, long-poll
/// sessions) and live subscriptions, against <see cref="LimitOptions.MaxConnectionsPerIdentity"/>,
/// <see cref="LimitOptions.MaxSubscriptionsPerIdentity"/> and <see cref="LimitOptions.MaxWildcardPatternsPerIdentity"/>. One identity filling its quota leaves the
/// broker's global limits (<c>MaxConnections</c>, <c>MaxTopics</c>) to the others; those stay as the last
/// resort. With authentication off every client is the same "anonymous", so its quota is kept per remote
/// address instead.
/// </summary>
/// <remarks>
/// Threading: clients are claimed and released under <c>_gate</c> (once per client, never per message); an
/// entry is forgotten when its last client leaves. Subscription counts are atomic on the entry, which a
/// session keeps for its life, so a late release on a forgotten entry is harmless.
/// </remarks>
internal sealed class IdentityQuotas
{
    private readonly Dictionary<string, IdentityUsage> _usage = [];
    private readonly Lock _gate = new();
    private readonly LimitOptions _limits;

    public IdentityQuotas(LimitOptions limits) => _limits = limits;

    /// <summary>Who a quota is kept for: the identity, or (anonymous) the remote address.</summary>
    public static string KeyOf(Identity identity, EndPoint? remote) =>
        !ReferenceEquals(identity, Identity.Anonymous) ? identity.Name
        : (remote as IPEndPoint)?.Address is { } address ? $"anonymous@{(address.IsIPv4MappedToIPv6 ? address.MapToIPv4() : address)}"
        : identity.Name;

    /// <summary>Claims one client for <paramref name="key"/>; null when it holds its maximum already.</summary>
    public IdentityUsage? TryClaimClient(string key)
    {
        lock (_gate)
        {
            if (!_usage.TryGetValue(key, out IdentityUsage? usage))
            {
                usage = new IdentityUsage(key);
                _usage.Add(key, usage);
            }

            if (_limits.MaxConnectionsPerIdentity > 0 && usage.Clients >= _limits.MaxConnectionsPerIdentity)
            {
                if (usage.Clients == 0)
                {
                    _usage.Remove(key);
                }

                return null;
            }

            usage.Clients++;
            return usage;
        }
    }

    /// <summary>Gives back a client claimed by <see cref="TryClaimClient"/>. Once per claim.</summary>
    public void ReleaseClient(IdentityUsage usage)
    {
        lock (_gate)
        {
            if (--usage.Clients == 0)
            {
                _usage.Remove(usage.Key);
            }
        }
    }
}

/// <summary>One identity's (or anonymous address's) clients and subscriptions, across all its sessions.</summary>
internal sealed class IdentityUsage
{
    private int _subscriptions;
    private int _wildcards;

    public IdentityUsage(string key) => Key = key;

    public string Key { get; }

    /// <summary>Clients held. Guarded by the <see cref="IdentityQuotas"/> gate.</summary>
    public int Clients { get; set; }

    public int Subscriptions => Volatile.Read(ref _subscriptions);

    /// <summary>Subscriptions held whose pattern has a wildcard (<see cref="LimitOptions.MaxWildcardPatternsPerIdentity"/>).</summary>
    public int Wildcards => Volatile.Read(ref _wildcards);

    /// <summary>
    /// Counts one more subscription to <paramref name="pattern"/> (checked) against the identity's quotas
    /// (<see cref="LimitOptions.MaxSubscriptionsPerIdentity"/>, and <see cref="LimitOptions.MaxWildcardPatternsPerIdentity"/>
    /// for a pattern with a wildcard, its reply inbox's as any other); null, or why not (nothing counted then).
    /// </summary>
    public string? TryAddSubscription(string pattern, LimitOptions limits)
    {
        if (!TryIncrement(ref _subscriptions, limits.MaxSubscriptionsPerIdentity))
        {
            return $"'{Key}' holds its maximum of {limits.MaxSubscriptionsPerIdentity} subscriptions across its connections.";
        }

        if (HasWildcard(pattern) && !TryIncrement(ref _wildcards, limits.MaxWildcardPatternsPerIdentity))
        {
            Interlocked.Decrement(ref _subscriptions);
            return $"'{Key}' holds its maximum of {limits.MaxWildcardPatternsPerIdentity} wildcard patterns across its connections (those under its reply inbox included).";
        }

        return null;
    }

    /// <summary>Gives back a subscription to <paramref name="pattern"/> counted by <see cref="TryAddSubscription"/>.</summary>
    public void RemoveSubscription(string pattern)
    {
        Interlocked.Decrement(ref _subscriptions);
        if (HasWildcard(pattern))
        {
            Interlocked.Decrement(ref _wildcards);
        }
    }

    private static bool HasWildcard(string pattern) => pattern.AsSpan().IndexOfAny('*', '>') >= 0;

    /// <summary>Counts one more unless that would pass <paramref name="max"/> (0: no limit).</summary>
    private static bool TryIncrement(ref int count, int max)
    {
        if (Interlocked.Increment(ref count) <= max || max == 0)
        {
            return true;
        }

        Interlocked.Decrement(ref count);
        return false;
    }
}
