using System.Buffers;
using Herald.Client.Protocol;
using Herald.Protocol;

namespace Herald.Client.Transports;

/// <summary>
/// The frames one connection has yet to write, in the order they were queued, and the loop that writes
/// them. Producers (publishers, the reader answering PINGs, subscribes) encode straight into the pending
/// buffer under a short lock; the writer swaps it for an empty one and writes the whole batch with one
/// call, so a burst of publications costs one system call (TCP) or one POST (long-poll), never one each.
/// </summary>
/// <remarks>
/// Bounded: PUBLISH bytes pending may not pass the limit (one frame is always let in), so a publisher
/// faster than the socket waits for room (<see cref="WaitForRoomAsync"/>). Control frames are never
/// refused. Thread-safe; <see cref="RunWriterAsync"/> runs once per connection.
/// </remarks>
internal sealed class FrameQueue
{
    private const int InitialCapacity = 4096;
    private const int ShrinkAbove = 1024 * 1024;

    private readonly Lock _gate = new();
    private readonly int _limit;
    private ArrayBufferWriter<byte> _pending = new(InitialCapacity);
    private ArrayBufferWriter<byte> _writing = new(InitialCapacity);
    private int _publishBytes;
    private bool _busy;
    private bool _closed;
    private TaskCompletionSource? _wake;
    private TaskCompletionSource? _room;
    private List<TaskCompletionSource>? _pendingWaiters;
    private List<TaskCompletionSource>? _writingWaiters;

    public FrameQueue(int limit) => _limit = Math.Max(limit, 1);

    public bool IsClosed
    {
        get
        {
            lock (_gate)
            {
                return _closed;
            }
        }
    }

    /// <summary>Queues a PUBLISH (with its encoded header block, if not empty); <c>false</c> when there is no room (see <see cref="WaitForRoomAsync"/>) or the queue is closed.</summary>
    public bool TryEnqueuePublish(ReadOnlySpan<byte> topic, ReadOnlySpan<byte> replyTo, PayloadFlags flags, ReadOnlySpan<byte> payload, ReadOnlySpan<byte> headers)
    {
        int size = ClientFrames.PublishSize(topic.Length, replyTo.Length, flags, payload.Length, headers.Length);
        lock (_gate)
        {
            if (_closed || (_publishBytes > 0 && _publishBytes + size > _limit))
            {
                return false;
            }

            ClientFrames.Publish(_pending, topic, replyTo, flags, payload, headers);
            _publishBytes += size;
            WakeWriter();
            return true;
        }
    }

    /// <summary>Completes when a publication may fit again, or the queue closed.</summary>
    public Task WaitForRoomAsync()
    {
        lock (_gate)
        {
            if (_closed || _publishBytes == 0)
            {
                return Task.CompletedTask;
            }

            _room ??= NewSignal();
            return _room.Task;
        }
    }

    /// <summary>Appends whole frames (buffered publications moved over after a reconnect); no limit applies.</summary>
    public bool Append(ReadOnlySpan<byte> frames, bool publications)
    {
        lock (_gate)
        {
            if (_closed)
            {
                return false;
            }

            _pending.Write(frames);
            if (publications)
            {
                _publishBytes += frames.Length;
            }

            WakeWriter();
            return true;
        }
    }

    public bool EnqueuePing() => EnqueueControl(static (w, _, _, _, _) => ClientFrames.Ping(w), 0, null, SubscribeOptions.None, null);

    public bool EnqueuePong() => EnqueueControl(static (w, _, _, _, _) => ClientFrames.Pong(w), 0, null, SubscribeOptions.None, null);

    /// <summary>
    /// PING, SUBSCRIBE, PING in one go: the two PONGs bracket what the broker answers to this SUBSCRIBE
    /// alone (a non-fatal refusal carries no sid, spec §8), since nothing else can be queued between them.
    /// </summary>
    public bool EnqueueFencedSubscribe(uint sid, byte[] pattern, SubscribeOptions options, StreamPosition? since = null, byte[]? queue = null)
    {
        lock (_gate)
        {
            if (_closed)
            {
                return false;
            }

            // Encoded into a scratch buffer first: a SUBSCRIBE the codec refuses leaves nothing half-queued.
            var subscribe = new ArrayBufferWriter<byte>(64);
            ClientFrames.Subscribe(subscribe, sid, pattern, options, since, queue);
            ClientFrames.Ping(_pending);
            _pending.Write(subscribe.WrittenSpan);
            ClientFrames.Ping(_pending);
            WakeWriter();
            return true;
        }
    }

    /// <summary>HELLO again with a fresh credential (spec §4.1 refresh), then a PING to wait for the broker's answer behind it.</summary>
    public bool EnqueueRefresh(string clientName, Capabilities capabilities, string? credential, string? info)
    {
        lock (_gate)
        {
            if (_closed)
            {
                return false;
            }

            ClientFrames.Hello(_pending, clientName, capabilities, credential, info: info);
            ClientFrames.Ping(_pending);
            WakeWriter();
            return true;
        }
    }

    /// <summary>PRESENCE (spec §15.3); its PRESENCE_REPLY names <paramref name="requestId"/>.</summary>
    public bool EnqueuePresence(uint requestId, byte[] topic, ulong limit, string? cursor)
    {
        lock (_gate)
        {
            if (_closed)
            {
                return false;
            }

            ClientFrames.Presence(_pending, requestId, topic, limit, cursor);
            WakeWriter();
            return true;
        }
    }

    /// <summary>PING, UNSUBSCRIBE, PING in one go: the two PONGs bracket the broker's answer to this UNSUBSCRIBE alone (spec §4.7).</summary>
    public bool EnqueueFencedUnsubscribe(uint sid)
    {
        lock (_gate)
        {
            if (_closed)
            {
                return false;
            }

            ClientFrames.Ping(_pending);
            ClientFrames.Unsubscribe(_pending, sid);
            ClientFrames.Ping(_pending);
            WakeWriter();
            return true;
        }
    }

    public bool EnqueueUnsubscribe(uint sid) => EnqueueControl(static (w, sid, _, _, _) => ClientFrames.Unsubscribe(w, sid), sid, null, SubscribeOptions.None, null);

    /// <summary>Completes once every frame queued before this call has been written (long-poll: POSTed and accepted).</summary>
    public Task WhenWrittenAsync()
    {
        lock (_gate)
        {
            if (_closed)
            {
                return Task.FromException(new HeraldConnectionException("The connection is closed."));
            }

            List<TaskCompletionSource>? waiters = _pending.WrittenCount > 0 ? (_pendingWaiters ??= []) : _busy ? (_writingWaiters ??= []) : null;
            if (waiters is null)
            {
                return Task.CompletedTask;
            }

            TaskCompletionSource done = NewSignal();
            waiters.Add(done);
            return done.Task;
        }
    }

    /// <summary>
    /// Writes batches until the queue is closed or <paramref name="write"/> throws (the caller treats that
    /// as a lost connection). A batch being written when the connection drops is lost (at most once).
    /// </summary>
    public async Task RunWriterAsync(Func<ReadOnlyMemory<byte>, CancellationToken, ValueTask> write, CancellationToken cancellationToken)
    {
        while (true)
        {
            Task? idle = null;
            TaskCompletionSource? room;
            lock (_gate)
            {
                if (_closed)
                {
                    return;
                }

                room = null;
                if (_pending.WrittenCount == 0)
                {
                    _wake ??= NewSignal();
                    idle = _wake.Task;
                }
                else
                {
                    (_pending, _writing) = (_writing, _pending);
                    _publishBytes = 0;
                    _busy = true;
                    _writingWaiters = _pendingWaiters;
                    _pendingWaiters = null;
                    room = _room;
                    _room = null;
                }
            }

            if (idle is not null)
            {
                await idle.WaitAsync(cancellationToken).ConfigureAwait(false);
                continue;
            }

            room?.TrySetResult();
            await write(_writing.WrittenMemory, cancellationToken).ConfigureAwait(false);

            List<TaskCompletionSource>? written;
            lock (_gate)
            {
                _busy = false;
                written = _writingWaiters;
                _writingWaiters = null;
                if (_writing.Capacity > ShrinkAbove)
                {
                    _writing = new ArrayBufferWriter<byte>(InitialCapacity); // a burst is over: give its memory back
                }
                else
                {
                    _writing.ResetWrittenCount();
                }
            }

            written?.ForEach(static w => w.TrySetResult());
        }
    }

    /// <summary>
    /// Closes the queue: nothing more is queued or written. Returns the frames never handed to the writer
    /// (the reconnect keeps their PUBLISH frames); waiters are released, flushes fail with <paramref name="reason"/>.
    /// </summary>
    public byte[] Close(Exception reason)
    {
        byte[] unsent;
        TaskCompletionSource? wake, room;
        List<TaskCompletionSource>? waiting = null;
        lock (_gate)
        {
            if (_closed)
            {
                return [];
            }

            _closed = true;
            unsent = _pending.WrittenSpan.ToArray();
            _pending = new ArrayBufferWriter<byte>(1);
            _publishBytes = 0;
            (wake, _wake) = (_wake, null);
            (room, _room) = (_room, null);
            if (_pendingWaiters is not null || _writingWaiters is not null)
            {
                waiting = [.. _pendingWaiters ?? [], .. _writingWaiters ?? []];
            }

            _pendingWaiters = _writingWaiters = null;
        }

        wake?.TrySetResult();
        room?.TrySetResult();
        waiting?.ForEach(w => w.TrySetException(reason));
        return unsent;
    }

    private bool EnqueueControl(Action<IBufferWriter<byte>, uint, byte[]?, SubscribeOptions, StreamPosition?> write, uint sid, byte[]? pattern, SubscribeOptions options, StreamPosition? since)
    {
        lock (_gate)
        {
            if (_closed)
            {
                return false;
            }

            write(_pending, sid, pattern, options, since);
            WakeWriter();
            return true;
        }
    }

    /// <summary>Caller holds <c>_gate</c>.</summary>
    private void WakeWriter()
    {
        if (_wake is not null)
        {
            _wake.TrySetResult();
            _wake = null;
        }
    }

    private static TaskCompletionSource NewSignal() => new(TaskCreationOptions.RunContinuationsAsynchronously);
}
