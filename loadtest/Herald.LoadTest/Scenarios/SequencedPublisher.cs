using System.Buffers.Binary;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
using static Herald.LoadTest.Scenarios.FanoutScenario;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// The publishing side of the scenarios whose subscribers check sequence numbers (<c>fanout</c>,
/// <c>stalled</c>): one payload buffer stamped with each publication's number (the client copies each
/// publication, so one buffer serves all) with the expected header block, if any, the count handed to the
/// client, and how a publishing loop ends.
/// The scenario's publisher decides when to publish (flow control, a rate).
/// Threading: only the publishing task calls <see cref="PublishNextAsync"/> and <see cref="RunAsync"/>;
/// other tasks read <see cref="Published"/> and <see cref="Failure"/> while it runs.
/// </summary>
internal sealed class SequencedPublisher(IPubSubClient client, string topic, ExpectedPayload expected, RunLog log)
{
    private readonly byte[] _payload = [.. expected.Bytes];
    private long _published; // handed to the client
    private volatile string? _failure;

    public IPubSubClient Client => client;

    public long Published => Volatile.Read(ref _published);

    public string? Failure => _failure ?? client.Failure;

    /// <summary>
    /// Stamps the next number into the payload and hands it to the client without sending it yet; it counts
    /// as published once copied into the send buffer, and the returned wait is for room in that buffer.
    /// </summary>
    public ValueTask PublishNextAsync(CancellationToken stop)
    {
        long sequence = _published;
        if (expected.HasSequence)
        {
            BinaryPrimitives.WriteInt64LittleEndian(_payload, sequence);
        }

        ValueTask appended = client.PublishAsync(topic, _payload, default, expected.Headers, sendNow: false, stop);
        Volatile.Write(ref _published, sequence + 1);
        return appended;
    }

    /// <summary>
    /// Runs the scenario's publishing <paramref name="loop"/> until <paramref name="stop"/> or the connection
    /// ends (recorded as <see cref="Failure"/>), then sends what is still buffered; the caller bounds that
    /// wait (<c>--grace</c>).
    /// </summary>
    public async Task RunAsync(Func<Task> loop, CancellationToken stop)
    {
        try
        {
            await loop();
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
            // the window is over
        }
        catch (Exception e) when (RunState.IsConnectionEnd(e))
        {
            _failure ??= e.Message;
            log.Report("publisher", $"publish failed: {e.Message}");
        }

        try
        {
            await client.FlushAsync(CancellationToken.None);
        }
        catch (Exception e) when (RunState.IsConnectionEnd(e))
        {
            _failure ??= e.Message;
        }
    }
}
