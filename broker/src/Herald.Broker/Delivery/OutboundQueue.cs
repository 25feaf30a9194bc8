using System.Buffers;
using System.IO.Pipelines;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Delivery;

/// <summary>What a connection does when its queue is over its limits (spec §6.3).</summary>
public enum SlowConsumerPolicy
{
    /// <summary>Discard the queue, send a fatal SlowConsumer ERROR and close.</summary>
    Disconnect,

    /// <summary>Discard the oldest queued messages and tell the client how many it missed.</summary>
    DropOldest,
}

/// <summary>
/// A connection's outgoing frames, between the publishers that fill it (any thread) and the one writer
/// that copies them into the transport's <see cref="PipeWriter"/>.
/// </summary>
/// <remarks>
/// <para>
/// Publishers append (frame reference, sid) pairs under <c>_gate</c>: an O(1) critical section, no I/O.
/// The first append after the queue went idle returns <c>true</c>, and that publisher calls
/// <see cref="Flush"/> once at the end of its read batch. A single drain then takes everything queued,
/// copies it into the pipe (stamping each MESSAGE's sid into its copy), and flushes once: many frames per
/// flush, never a flush per message. While a drain is running, appends return <c>false</c> and the same
/// drain picks them up on its next turn, so at most one drain runs per connection.
/// </para>
/// <para>
/// Control frames (WELCOME, PING, PONG, non-fatal ERROR) are queued in order with the messages and are
/// never dropped. A fatal ERROR is written last, after which the queue accepts nothing more
/// (<see cref="Complete"/>).
/// </para>
/// </remarks>
internal sealed class OutboundQueue : IMessageSink, IThreadPoolWorkItem
{
    private const uint ControlSid = FrameCopy.ControlSid;
    private const int LargeArray = 8192;

    private readonly PipeWriter _output;
    private readonly int _maxPendingBytes;
    private readonly int _maxPendingMessages;
    private readonly SlowConsumerPolicy _policy;
    private readonly Action _onSlowConsumer;
    private readonly BrokerMetrics _metrics;
    private readonly string _transport;
    private readonly Lock _gate = new();

    // Guarded by _gate.
    private FrameRing _ring = new();
    private long _pendingBytes;
    private MessageBuffer? _final;
    private long _droppedUnreported;
    private bool _scheduled;
    private bool _completing;
    private bool _closed;
    private TaskCompletionSource? _drained;

    // Owned by the running drain.
    private QueuedFrame[] _batch = [];

    public OutboundQueue(PipeWriter output, string transport, int maxPendingBytes, int maxPendingMessages, SlowConsumerPolicy policy, BrokerMetrics metrics, Action onSlowConsumer)
    {
        _transport = transport;
        _metrics = metrics;
        _output = output;
        _maxPendingBytes = maxPendingBytes;
        _maxPendingMessages = maxPendingMessages;
        _policy = policy;
        _onSlowConsumer = onSlowConsumer;
    }

    /// <inheritdoc/>
    public bool AcceptsZstd { get; set; }

    /// <summary>Frames queued and not yet handed to the transport (monitoring).</summary>
    public (long Messages, long Bytes) Pending
    {
        get
        {
            lock (_gate)
            {
                return (_ring.Count, _pendingBytes);
            }
        }
    }

    /// <inheritdoc/>
    public bool Enqueue(MessageBuffer frame, uint sid)
    {
        bool slow = false;
        bool schedule;
        lock (_gate)
        {
            if (_completing)
            {
                frame.Release();
                return false;
            }

            if (_ring.Count + 1 > _maxPendingMessages || _pendingBytes + frame.Length > _maxPendingBytes)
            {
                if (_policy == SlowConsumerPolicy.Disconnect)
                {
                    frame.Release();
                    slow = true;
                    ClearMessages();
                    _final = ControlFrames.Error(ErrorCode.SlowConsumer, $"Slow consumer: more than {_maxPendingMessages} messages or {_maxPendingBytes} bytes were waiting to be sent to this connection.");
                    _completing = true;
                }
                else
                {
                    DropOldestFor(frame.Length);
                }
            }

            if (!slow)
            {
                _ring.Push(new QueuedFrame(frame, sid));
                _pendingBytes += frame.Length;
            }

            schedule = !_scheduled;
            _scheduled = true;
        }

        if (slow)
        {
            _metrics.SlowConsumer(nameof(SlowConsumerPolicy.Disconnect));
            _onSlowConsumer();
        }

        return schedule;
    }

    /// <summary>
    /// Queues a control frame (WELCOME, PING, PONG, a non-fatal ERROR) in order with the messages, so a
    /// PONG also tells the client that everything queued before it has been written. Control frames are
    /// never dropped and do not count against the limits. Returns whether to <see cref="Flush"/>.
    /// </summary>
    public bool EnqueueControl(MessageBuffer frame)
    {
        lock (_gate)
        {
            if (_completing)
            {
                frame.Release();
                return false;
            }

            _ring.Push(new QueuedFrame(frame, ControlSid)); // only messages count against the limits
            bool schedule = !_scheduled;
            _scheduled = true;
            return schedule;
        }
    }

    /// <summary>
    /// Stops accepting frames; the writer sends what is queued, then <paramref name="finalFrame"/> (if
    /// any, e.g. a fatal ERROR), and the returned task completes. With <paramref name="discardQueued"/> the
    /// queued messages are dropped first (a protocol error: the client gets its ERROR at once).
    /// </summary>
    public Task Complete(MessageBuffer? finalFrame, bool discardQueued)
    {
        bool schedule;
        Task drained;
        lock (_gate)
        {
            if (_closed)
            {
                finalFrame?.Release();
                return Task.CompletedTask;
            }

            if (discardQueued)
            {
                ClearMessages();
            }

            if (finalFrame is not null)
            {
                if (_final is null)
                {
                    _final = finalFrame;
                }
                else
                {
                    finalFrame.Release(); // the first reason to close wins (e.g. SlowConsumer)
                }
            }

            _completing = true;
            _drained ??= new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            drained = _drained.Task;
            schedule = !_scheduled;
            _scheduled = true;
        }

        if (schedule)
        {
            Flush();
        }

        return drained;
    }

    /// <summary>Drops everything still queued (the connection is gone). Safe to call more than once.</summary>
    public void Abandon()
    {
        lock (_gate)
        {
            _completing = true;
            _closed = true;
            ClearMessages();
            _final?.Release();
            _final = null;
            _drained?.TrySetResult();
        }
    }

    /// <inheritdoc/>
    public void Flush() => _ = DrainAsync();

    /// <inheritdoc/>
    public void ScheduleFlush() => ThreadPool.UnsafeQueueUserWorkItem(this, preferLocal: false);

    void IThreadPoolWorkItem.Execute() => _ = DrainAsync();

    private async Task DrainAsync()
    {
        try
        {
            while (true)
            {
                int count;
                long dropped;
                MessageBuffer? final = null;
                lock (_gate)
                {
                    if (_closed)
                    {
                        _scheduled = false;
                        return;
                    }

                    count = _ring.Count;
                    dropped = _droppedUnreported;
                    _droppedUnreported = 0;
                    if (count > 0)
                    {
                        _ring.MoveAllTo(ref _batch);
                        _pendingBytes = 0;
                    }

                    if (_completing)
                    {
                        final = _final;
                        _final = null;
                    }

                    if (count == 0 && dropped == 0 && final is null)
                    {
                        if (_completing)
                        {
                            _closed = true;
                            _drained?.TrySetResult();
                        }

                        _scheduled = false;
                        return;
                    }
                }

                if (dropped > 0)
                {
                    _metrics.SlowConsumer(nameof(SlowConsumerPolicy.DropOldest));
                    _metrics.Dropped(dropped);
                    WriteDroppedNotice(dropped);
                }

                QueuedFrame[] batch = _batch;
                int messages = 0;
                long bytes = 0;
                for (int i = 0; i < count; i++)
                {
                    ref QueuedFrame entry = ref batch[i];
                    MessageBuffer frame = entry.Frame;
                    FrameCopy.Write(_output, frame.Span, entry.Sid);
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

                if (final is not null)
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
                    Abandon(); // the peer is gone: nothing more can be written
                    return;
                }
            }
        }
        catch (Exception e) when (e is InvalidOperationException or IOException or ObjectDisposedException)
        {
            // The transport was completed under us (connection aborted): drop what is left.
            Abandon();
            lock (_gate)
            {
                _scheduled = false;
            }
        }
    }

    private void WriteDroppedNotice(long dropped)
    {
        FrameWriter.WriteError(_output, ErrorCode.MessagesDropped, fatal: false, $"Slow consumer: {dropped} messages were dropped because more than {_maxPendingMessages} messages or {_maxPendingBytes} bytes were waiting.", (ulong)dropped);
    }

    // Caller holds _gate. Drops the oldest messages until `incoming` fits; control frames met on the
    // way are kept, in order, at the front.
    private void DropOldestFor(int incoming)
    {
        int keptControls = 0;
        while (_ring.Count > keptControls && (_ring.Count + 1 > _maxPendingMessages || _pendingBytes + incoming > _maxPendingBytes))
        {
            QueuedFrame entry = _ring[keptControls];
            if (entry.Sid == ControlSid)
            {
                keptControls++;
                continue;
            }

            _pendingBytes -= entry.Frame.Length;
            entry.Frame.Release();
            _droppedUnreported++;

            // Close the gap: shift the kept control frames one slot towards the back, then drop the front.
            for (int i = keptControls; i > 0; i--)
            {
                _ring[i] = _ring[i - 1];
            }

            _ring.PopFront();
        }
    }

    // Caller holds _gate.
    private void ClearMessages()
    {
        while (_ring.Count > 0)
        {
            _ring.PopFront().Frame.Release();
        }

        _pendingBytes = 0;
    }
}
