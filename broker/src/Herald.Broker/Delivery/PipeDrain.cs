using System.Buffers;
using System.IO.Pipelines;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Delivery;

/// <summary>
/// Writes a <see cref="SubscriberBacklog"/> into a byte stream (a TCP connection's <see cref="PipeWriter"/>;
/// a WebSocket's next): each turn takes everything queued, copies it out (stamping each MESSAGE's sid into
/// its copy), reports drops, and flushes once. Many frames per flush, never a flush per message.
/// </summary>
/// <remarks>
/// <para>
/// At most one drain runs per backlog: the backlog wakes it once when frames start waiting, and it runs
/// until a take finds nothing (the backlog then marks it idle under its lock, so no wake-up is lost).
/// </para>
/// <para>
/// A stalled subscriber costs its own queue and nothing more. Each turn takes at most
/// <see cref="WriteChunkBytes"/> and awaits the flush before the next, so what waits beyond the backlog's
/// limits is one chunk plus the transport's output buffer (Kestrel pauses a connection's writer past its
/// <c>MaxWriteBufferSize</c>, 64 KiB) and the kernel's socket buffer; the rest stays in the backlog, counted.
/// While the flush waits for a peer that does not read, the drain is not idle: the backlog does not wake it
/// again, so publishers do nothing for this subscriber beyond the enqueue, and no thread is held.
/// </para>
/// </remarks>
internal sealed class PipeDrain : IBacklogReader, IThreadPoolWorkItem
{
    private const uint ControlSid = FrameCopy.ControlSid;
    private const int LargeArray = 8192;

    /// <summary>The most one turn copies into the output before it flushes (one frame if that is bigger).</summary>
    public const int WriteChunkBytes = 64 * 1024;

    private readonly SubscriberBacklog _backlog;
    private readonly PipeWriter _output;
    private readonly BrokerMetrics _metrics;
    private readonly string _transport;

    // Owned by the running drain.
    private QueuedFrame[] _batch = [];

    public PipeDrain(SubscriberBacklog backlog, PipeWriter output, string transport, BrokerMetrics metrics)
    {
        _backlog = backlog;
        _output = output;
        _transport = transport;
        _metrics = metrics;
        backlog.Reader = this;
    }

    /// <inheritdoc/>
    public void Wake(bool inline)
    {
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
                StreamTake take = _backlog.Take(ref _batch, WriteChunkBytes);
                if (take.Idle)
                {
                    return;
                }

                if (take.Dropped > 0)
                {
                    BacklogLimits limits = _backlog.Limits;
                    FrameWriter.WriteError(_output, ErrorCode.MessagesDropped, fatal: false, $"Slow consumer: {take.Dropped} messages were dropped because more than {limits.MaxMessages} messages or {limits.MaxBytes} bytes were waiting.", (ulong)take.Dropped);
                }

                QueuedFrame[] batch = _batch;
                int messages = 0;
                long bytes = 0;
                long written = 0;
                for (int i = 0; i < take.Count; i++)
                {
                    ref QueuedFrame entry = ref batch[i];
                    MessageBuffer frame = entry.Frame;
                    FrameCopy.Write(_output, frame.Span, entry.Sid);
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
