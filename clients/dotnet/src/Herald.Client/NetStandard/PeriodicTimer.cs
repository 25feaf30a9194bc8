// Compiled for netstandard2.0 only (see Herald.Client.csproj): .NET 6's PeriodicTimer, as the client uses it (one
// waiter at a time), over a System.Threading.Timer. A tick that comes while nobody waits is kept for the next wait,
// as there.
namespace System.Threading;

[Microsoft.CodeAnalysis.Embedded]
internal sealed class PeriodicTimer : IDisposable
{
    private readonly object _gate = new();
    private readonly Timer _timer;
    private bool _ticked; // caller holds _gate
    private bool _disposed; // caller holds _gate
    private TaskCompletionSource<bool>? _waiter; // caller holds _gate

    public PeriodicTimer(TimeSpan period) => _timer = new Timer(_ => Signal(true), null, period, period);

    /// <summary>True at the next tick; false once disposed.</summary>
    public ValueTask<bool> WaitForNextTickAsync(CancellationToken cancellationToken = default)
    {
        TaskCompletionSource<bool> waiter;
        lock (_gate)
        {
            if (_disposed)
            {
                return new ValueTask<bool>(false);
            }

            if (_ticked)
            {
                _ticked = false;
                return new ValueTask<bool>(true);
            }

            waiter = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
            _waiter = waiter;
        }

        return new ValueTask<bool>(WaitAsync(waiter, cancellationToken));
    }

    public void Dispose()
    {
        _timer.Dispose();
        Signal(false);
    }

    private static async Task<bool> WaitAsync(TaskCompletionSource<bool> waiter, CancellationToken cancellationToken)
    {
        using (cancellationToken.Register(() => waiter.TrySetCanceled(cancellationToken)))
        {
            return await waiter.Task.ConfigureAwait(false);
        }
    }

    private void Signal(bool tick)
    {
        TaskCompletionSource<bool>? waiter;
        lock (_gate)
        {
            if (_disposed)
            {
                return;
            }

            _disposed = !tick;
            waiter = _waiter;
            _waiter = null;
            _ticked = tick && waiter is null;
        }

        waiter?.TrySetResult(tick);
    }
}
