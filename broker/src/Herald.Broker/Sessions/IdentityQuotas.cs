using System.Net;
using Herald.Broker.Security;

namespace Herald.Broker.Sessions;

/// <summary>
/// What each identity holds across all its clients, on every transport: clients (TCP connections, long-poll
/// sessions) and live subscriptions, against <see cref="LimitOptions.MaxConnectionsPerIdentity"/> and
/// <see cref="LimitOptions.MaxSubscriptionsPerIdentity"/>. One identity filling its quota leaves the
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

    public IdentityUsage(string key) => Key = key;

    public string Key { get; }

    /// <summary>Clients held. Guarded by the <see cref="IdentityQuotas"/> gate.</summary>
    public int Clients { get; set; }

    public int Subscriptions => Volatile.Read(ref _subscriptions);

    /// <summary>Counts one more subscription, unless that would pass <paramref name="max"/> (0: no limit).</summary>
    public bool TryAddSubscription(int max)
    {
        if (Interlocked.Increment(ref _subscriptions) <= max || max == 0)
        {
            return true;
        }

        Interlocked.Decrement(ref _subscriptions);
        return false;
    }

    public void RemoveSubscriptions(int count) => Interlocked.Add(ref _subscriptions, -count);
}
