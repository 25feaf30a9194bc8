using System.Buffers;

namespace Herald.LoadTest.Targets;

/// <summary>
/// The send side every socket-based <see cref="IPubSubClient"/> shares: publications are encoded straight
/// into one buffer under a short lock, and one writer sends whatever accumulated since its last send in a
/// single call, so a burst of N publications costs a handful of system calls, not N. When nothing is being
/// sent, the publishing thread starts the send itself (no thread-pool hop on an idle connection, which is
/// what request/reply latency needs); while a send is in flight, later publications join the next batch.
/// A producer in a tight loop appends with <see cref="SendPolicy.WhenFull"/> and flushes at the end, and a
/// client dispatching a received batch appends replies with <see cref="SendPolicy.Deferred"/> and calls
/// <see cref="Kick"/> after the batch: one send for all the replies.
/// </summary>
internal sealed class BatchedWriter
{
    /// <summary>With <see cref="SendPolicy.WhenFull"/>, the buffered bytes at which a send starts.</summary>
    public const int BatchBytes = 64 * 1024;

    private readonly Func<ReadOnlyMemory<byte>, CancellationToken, ValueTask> _send;
    private readonly Lock _gate = new();
    private readonly int _highWater;
    private ArrayBufferWriter<byte> _filling = new(64 * 1024);
    private ArrayBufferWriter<byte> _sending = new(64 * 1024);
    private long _appended; // bytes handed to the writer so far
    private long _sent;     // bytes sent so far
    private bool _writing;
    private TaskCompletionSource? _progress; // completed after each send; created by whoever waits
    private string? _failure;

    /// <param name="send">Sends the whole buffer (loops over partial sends itself).</param>
    /// <param name="highWater">Unsent bytes above which <see cref="WaitForRoomAsync"/> waits.</param>
    public BatchedWriter(Func<ReadOnlyMemory<byte>, CancellationToken, ValueTask> send, int highWater = 1024 * 1024)
    {
        _send = send;
        _highWater = highWater;
    }

    /// <summary>Why sending stopped (the connection failed), or null.</summary>
    public string? Failure => Volatile.Read(ref _failure);

    public long Unsent
    {
        get
        {
            lock (_gate)
            {
                return _appended - _sent;
            }
        }
    }

    /// <summary>
    /// Holds the buffer for one or more frames: <c>using (var scope = writer.BeginAppend()) FrameWriter.Write...(scope.Buffer, ...);</c>.
    /// Disposing the scope releases the lock and starts a send when none is running.
    /// </summary>
    public AppendScope BeginAppend(SendPolicy policy = SendPolicy.Now)
    {
        _gate.Enter();
        return new AppendScope(this, _filling.WrittenCount, policy);
    }

    /// <summary>Starts a send of whatever is buffered, unless one is running (it will take it).</summary>
    public void Kick()
    {
        _gate.Enter();
        EndAppend(_filling.WrittenCount, SendPolicy.Now);
    }

    /// <summary>Waits while more than the high-water mark is unsent; returns at once otherwise.</summary>
    public ValueTask WaitForRoomAsync(CancellationToken cancellationToken)
    {
        lock (_gate)
        {
            if (_appended - _sent <= _highWater || _failure is not null)
            {
                return ValueTask.CompletedTask;
            }
        }

        return new ValueTask(WaitUntilAsync(() => _appended - _sent <= _highWater, cancellationToken));
    }

    /// <summary>Completes when every byte appended before the call has been sent (or sending failed).</summary>
    public ValueTask FlushAsync(CancellationToken cancellationToken)
    {
        Kick();
        long target;
        lock (_gate)
        {
            target = _appended;
            if (_sent >= target || _failure is not null)
            {
                return ValueTask.CompletedTask;
            }
        }

        return new ValueTask(WaitUntilAsync(() => _sent >= target, cancellationToken));
    }

    private async Task WaitUntilAsync(Func<bool> done, CancellationToken cancellationToken)
    {
        while (true)
        {
            Task progress;
            lock (_gate)
            {
                if (done() || _failure is not null)
                {
                    return;
                }

                _progress ??= new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
                progress = _progress.Task;
            }

            await progress.WaitAsync(cancellationToken);
        }
    }

    private void EndAppend(int writtenBefore, SendPolicy policy)
    {
        bool start = false;
        _appended += _filling.WrittenCount - writtenBefore;
        bool send = policy switch
        {
            SendPolicy.Now => true,
            SendPolicy.WhenFull => _filling.WrittenCount >= BatchBytes,
            _ => false,
        };
        if (send && !_writing && _failure is null && _filling.WrittenCount > 0)
        {
            _writing = true;
            start = true;
        }

        _gate.Exit();
        if (start)
        {
            _ = WriteLoopAsync(); // runs inline until the first send that does not complete at once
        }
    }

    private async Task WriteLoopAsync()
    {
        while (true)
        {
            ArrayBufferWriter<byte> batch;
            lock (_gate)
            {
                if (_filling.WrittenCount == 0)
                {
                    _writing = false;
                    return;
                }

                batch = _filling;
                _filling = _sending;
                _sending = batch;
            }

            try
            {
                await _send(batch.WrittenMemory, CancellationToken.None);
            }
            catch (Exception e)
            {
                TaskCompletionSource? failed;
                lock (_gate)
                {
                    _failure ??= $"send failed: {e.Message}";
                    _writing = false;
                    failed = _progress;
                    _progress = null;
                }

                failed?.TrySetResult();
                return;
            }

            TaskCompletionSource? progress;
            lock (_gate)
            {
                _sent += batch.WrittenCount;
                batch.ResetWrittenCount();
                progress = _progress;
                _progress = null;
            }

            progress?.TrySetResult();
        }
    }

    /// <summary>The lock on the buffer, from <see cref="BeginAppend"/> to <see cref="Dispose"/>.</summary>
    public ref struct AppendScope
    {
        private readonly BatchedWriter _writer;
        private readonly int _writtenBefore;
        private readonly SendPolicy _policy;
        private bool _disposed;

        internal AppendScope(BatchedWriter writer, int writtenBefore, SendPolicy policy)
        {
            _writer = writer;
            _writtenBefore = writtenBefore;
            _policy = policy;
        }

        public readonly IBufferWriter<byte> Buffer => _writer._filling;

        public void Dispose()
        {
            if (!_disposed)
            {
                _disposed = true;
                _writer.EndAppend(_writtenBefore, _policy);
            }
        }
    }
}

/// <summary>When appended bytes are sent.</summary>
internal enum SendPolicy
{
    /// <summary>At once if no send is running (else with the running writer's next batch).</summary>
    Now,

    /// <summary>When <see cref="BatchedWriter.BatchBytes"/> have accumulated, or at the next flush or kick.</summary>
    WhenFull,

    /// <summary>Only at the next <see cref="BatchedWriter.Kick"/> or flush (or with a running writer's next batch).</summary>
    Deferred,
}
