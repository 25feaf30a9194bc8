using System.Buffers;
using System.IO.Pipelines;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Delivery;

/// <summary>
/// How a stream transport writes what its backlog holds: Herald frames (<see cref="FrameFormat"/>: TCP and
/// WebSocket), or another medium's events (Server-Sent Events). A struct for frames, so the drain's loop is
/// specialised and the TCP path pays no interface call per message.
/// </summary>
internal interface IDrainFormat
{
    /// <summary>One queued frame: a MESSAGE for <paramref name="sid"/>, or the session's own control frame (<see cref="FrameCopy.ControlSid"/>), already in this medium.</summary>
    void Write(PipeWriter output, MessageBuffer frame, uint sid);

    /// <summary>The subscriber missed <paramref name="dropped"/> messages (<see cref="SlowConsumerPolicy.DropOldest"/>).</summary>
    void WriteDropped(PipeWriter output, long dropped, BacklogLimits limits);

    /// <summary>The subscriber missed <paramref name="shed"/> messages shed on their way in from another node (<see cref="IMessageSink.Lost"/>): not its doing.</summary>
    void WriteShed(PipeWriter output, long shed);

    /// <summary>The subscriptions <paramref name="sids"/> may have lost an unknown number of messages (<see cref="IMessageSink.Gaps"/>).</summary>
    void WriteGaps(PipeWriter output, uint[] sids);
}

/// <summary>Herald frames as they are queued, each MESSAGE's sid stamped into its copy (spec §4.6); drops as a non-fatal ERROR.</summary>
internal readonly struct FrameFormat : IDrainFormat
{
    public void Write(PipeWriter output, MessageBuffer frame, uint sid) => FrameCopy.Write(output, frame.Span, sid);

    public void WriteDropped(PipeWriter output, long dropped, BacklogLimits limits) =>
        FrameWriter.WriteError(output, ErrorCode.MessagesDropped, fatal: false, $"Slow consumer: {dropped} messages were dropped because more than {limits.MaxMessages} messages or {limits.MaxBytes} bytes were waiting.", (ulong)dropped);

    public void WriteShed(PipeWriter output, long shed) =>
        FrameWriter.WriteError(output, ErrorCode.MessagesDropped, fatal: false, PipeDrain.ShedMessage(shed), (ulong)shed);

    /// <summary>One <c>MessagesDropped</c> with count 0 and the sids (spec §4.8), at most <see cref="PipeDrain.SidsPerFrame"/> a frame.</summary>
    public void WriteGaps(PipeWriter output, uint[] sids)
    {
        for (int start = 0; start < sids.Length; start += PipeDrain.SidsPerFrame)
        {
            FrameWriter.WriteMessagesLost(output, PipeDrain.GapsMessage, sids.AsSpan(start, Math.Min(PipeDrain.SidsPerFrame, sids.Length - start)));
        }
    }
}

/// <summary>What every <see cref="PipeDrain{TFormat}"/> shares.</summary>
internal static class PipeDrain
{
    /// <summary>The most one turn copies into the output before it flushes (one frame if that is bigger).</summary>
    public const int WriteChunkBytes = 64 * 1024;

    /// <summary>The most sids one loss notice names (a connection with more is told in several): at most about 5 KiB a frame.</summary>
    public const int SidsPerFrame = 1024;

    /// <summary>What a loss notice says to people (spec §6.3: its sids say which subscriptions).</summary>
    public const string GapsMessage = "These subscriptions may have lost an unknown number of messages: a Redis shard of the cluster that carries their topics was unreachable.";

    /// <summary>What a notice of messages shed on their way in from another node says to people (spec §6.3): the subscriber is not the cause.</summary>
    public static string ShedMessage(long shed) =>
        $"Inbound shed: {shed} messages for this client were shed before reaching it: publishers on other cluster nodes sent faster than this node could route, past its inbound bound (Herald:Cluster:MaxInboundMessages or MaxInboundBytes). Not a slow consumer.";
}

/// <summary>
/// Writes a <see cref="SubscriberBacklog"/> into a byte stream (a TCP connection's or a WebSocket's
/// <see cref="PipeWriter"/>, an event stream's response body): each turn takes everything queued, writes it
/// out in the transport's <typeparamref name="TFormat"/>, reports drops, and flushes once. Many frames per
/// flush, never a flush per message.
/// </summary>
/// <remarks>
/// <para>
/// At most one drain runs per backlog: the backlog wakes it once when frames start waiting, and it runs
/// until a take finds nothing (the backlog then marks it idle under its lock, so no wake-up is lost). The drain
/// holds to that itself too: a wake-up that arrives while it runs (a transport that attaches it after frames
/// were queued and wakes it, while a publisher that queued one of them wakes it late) is counted, not run
/// beside it, and makes the running drain take once more before it stops. Two drains at once would interleave
/// their writes into the one output and overwrite each other's batch.
/// </para>
/// <para>
/// A stalled subscriber costs its own queue and nothing more. Each turn takes at most
/// <see cref="PipeDrain.WriteChunkBytes"/> and awaits the flush before the next, so what waits beyond the backlog's
/// limits is one chunk plus the transport's output buffer (Kestrel pauses a connection's writer past its
/// <c>MaxWriteBufferSize</c>, 64 KiB) and the kernel's socket buffer; the rest stays in the backlog, counted.
/// While the flush waits for a peer that does not read, the drain is not idle: the backlog does not wake it
/// again, so publishers do nothing for this subscriber beyond the enqueue, and no thread is held.
/// </para>
/// </remarks>
internal sealed class PipeDrain<TFormat> : IBacklogReader, IThreadPoolWorkItem
    where TFormat : IDrainFormat
{
    private const uint ControlSid = FrameCopy.ControlSid;
    private const int LargeArray = 8192;

    private const int WriteChunkBytes = PipeDrain.WriteChunkBytes;

    private readonly SubscriberBacklog _backlog;
    private readonly PipeWriter _output;
    private readonly BrokerMetrics _metrics;
    private readonly string _transport;
    private readonly TFormat _format;

    // Owned by the running drain.
    private QueuedFrame[] _batch = [];

    // Wake-ups asked since the running drain last found nothing: the first one starts it; 0 when no drain runs.
    private int _wakes;

    /// <summary>Becomes <paramref name="backlog"/>'s reader; frames queued before are written at its first wake-up.</summary>
    public PipeDrain(SubscriberBacklog backlog, PipeWriter output, string transport, BrokerMetrics metrics, TFormat format)
    {
        _backlog = backlog;
        _format = format;
        _output = output;
        _transport = transport;
        _metrics = metrics;
        backlog.Reader = this;
    }

    /// <inheritdoc/>
    public void Wake(bool inline)
    {
        if (Interlocked.Increment(ref _wakes) != 1)
        {
            return; // a drain runs: it takes again before it stops
        }

        if (inline)
        {
            _ = DrainAsync();
        }
        else
        {
            ThreadPool.UnsafeQueueUserWorkItem(this, preferLocal: false);
        }
    }

    void IThreadPoolWorkItem.Execute() => _ = DrainAsync();

    private async Task DrainAsync()
    {
        try
        {
            while (true)
            {
                int wakes = Volatile.Read(ref _wakes);
                StreamTake take = _backlog.Take(ref _batch, WriteChunkBytes);
                if (take.Idle)
                {
                    if (Interlocked.CompareExchange(ref _wakes, 0, wakes) == wakes)
                    {
                        return; // nobody woke it meanwhile: the next wake-up starts a new drain
                    }

                    continue;
                }

                if (take.Dropped > 0)
                {
                    _format.WriteDropped(_output, take.Dropped, _backlog.Limits);
                }

                if (take.Shed > 0)
                {
                    _format.WriteShed(_output, take.Shed);
                }

                if (take.Gaps is { Length: > 0 } gaps)
                {
                    _format.WriteGaps(_output, gaps);
                }

                QueuedFrame[] batch = _batch;
                int messages = 0;
                long bytes = 0;
                long written = 0;
                for (int i = 0; i < take.Count; i++)
                {
                    ref QueuedFrame entry = ref batch[i];
                    MessageBuffer frame = entry.Frame;
                    _format.Write(_output, frame, entry.Sid);
                    written += frame.Length;
                    if (entry.Sid != ControlSid)
                    {
                        messages++;
                        bytes += frame.Length;
                    }

                    long receivedAt = frame.ReceivedAt;
                    if (frame.Release() && receivedAt != 0)
                    {
                        _metrics.FanoutCompleted(receivedAt); // this was the publication's last subscriber write
                    }

                    entry = default;
                }

                _metrics.Sent(_transport, messages, bytes);
                if (take.Final is { } final)
                {
                    _output.Write(final.Span);
                    final.Release();
                }

                if (_batch.Length > LargeArray)
                {
                    _batch = [];
                }

                ValueTask<FlushResult> flush = _output.FlushAsync();
                FlushResult result = flush.IsCompletedSuccessfully ? flush.Result : await flush.ConfigureAwait(false);
                if (result.IsCanceled || result.IsCompleted)
                {
                    _backlog.Abandon(); // the peer is gone: nothing more can be written
                    return;
                }

                if (written >= WriteChunkBytes)
                {
                    // A full chunk went out and more may wait: give the thread to the other drains queued
                    // on the pool and go on after them (still not idle, so nobody else wakes this drain).
                    // A subscriber filling its socket buffers before it stalls never delays the rest by more
                    // than one chunk at a time.
                    ThreadPool.UnsafeQueueUserWorkItem(this, preferLocal: false);
                    return;
                }
            }
        }
        catch (Exception e) when (e is InvalidOperationException or IOException or ObjectDisposedException)
        {
            // The transport was completed under us (connection aborted): drop what is left.
            _backlog.Abandon();
            _backlog.Take(ref _batch, WriteChunkBytes); // marks the drain idle
        }
    }
}
