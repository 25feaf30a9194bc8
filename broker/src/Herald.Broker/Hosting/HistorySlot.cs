using Herald.Broker.History;

namespace Herald.Broker.Hosting;

/// <summary>The node's topic histories, or none (no <c>Herald:History:Topics</c>); disposed with the host.</summary>
internal sealed class HistorySlot(HistoryStore? store) : IDisposable
{
    public HistoryStore? Store { get; } = store;

    public void Dispose() => Store?.Dispose();
}
