namespace Herald.Broker.Delivery;

/// <summary>
/// A sink that takes nothing: every frame is released and counted dropped. A stand-in where a sink is required but never
/// delivered to (a presence paging probe, a benchmark measuring the router alone, a test building a subscription).
/// </summary>
internal sealed class DiscardingSink : IMessageSink
{
    public static readonly DiscardingSink Instance = new();

    public bool AcceptsZstd => false;

    public bool AcceptsHeaders => false;

    public Enqueued Enqueue(MessageBuffer frame, uint sid)
    {
        frame.Release();
        return Enqueued.Dropped;
    }

    public void Flush()
    {
    }

    public void ScheduleFlush()
    {
    }
}
