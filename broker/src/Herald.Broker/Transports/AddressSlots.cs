using System.Collections.Concurrent;
using System.Net;

namespace Herald.Broker.Transports;

/// <summary>
/// Work in progress per remote address, capped (long-poll's <c>MaxPendingRequestsPerAddress</c>): one
/// address cannot take every slot of a transport by opening requests and trickling their bodies.
/// </summary>
/// <remarks>Thread-safe; an address with nothing in progress is forgotten.</remarks>
internal sealed class AddressSlots(int maxPerAddress)
{
    private readonly ConcurrentDictionary<IPAddress, int> _taken = new();

    /// <summary>Takes a slot for <paramref name="address"/>; <c>false</c> (nothing taken) over the cap. Without a cap or an address, always a slot.</summary>
    public bool TryTake(IPAddress? address, out Slot slot)
    {
        slot = maxPerAddress > 0 && address is not null ? new Slot(this, address) : default;
        if (slot.Address is not null && _taken.AddOrUpdate(address!, 1, static (_, n) => n + 1) > maxPerAddress)
        {
            slot.Dispose();
            slot = default;
            return false;
        }

        return true;
    }

    /// <summary>A slot taken; disposing it gives it back.</summary>
    internal readonly record struct Slot(AddressSlots? Owner, IPAddress? Address) : IDisposable
    {
        public void Dispose()
        {
            if (Owner is { } owner && Address is { } address && owner._taken.AddOrUpdate(address, 0, static (_, n) => n - 1) <= 0)
            {
                owner._taken.TryRemove(new KeyValuePair<IPAddress, int>(address, 0)); // only if still 0
            }
        }
    }
}
