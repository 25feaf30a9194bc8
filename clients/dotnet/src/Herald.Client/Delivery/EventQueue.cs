namespace Herald.Client.Delivery;

/// <summary>
/// Raises the client's events (<see cref="HeraldClient.StateChanged"/>, <see cref="HeraldClient.Error"/>)
/// one at a time, in the order they happened, on the thread pool: never on a caller's
/// <see cref="SynchronizationContext"/>, never on a connection's read loop (a slow handler cannot stall it).
/// </summary>
internal sealed class EventQueue
{
    private readonly Lock _gate = new();
    private readonly Queue<Action> _queue = new();
    private bool _draining;

    public void Post(Action raise)
    {
        lock (_gate)
        {
            _queue.Enqueue(raise);
            if (_draining)
            {
                return;
            }

            _draining = true;
        }

        ThreadPool.UnsafeQueueUserWorkItem(static state => ((EventQueue)state!).Drain(), this);
    }

    private void Drain()
    {
        while (true)
        {
            Action raise;
            lock (_gate)
            {
                if (!_queue.TryDequeue(out raise!))
                {
                    _draining = false;
                    return;
                }
            }

            try
            {
                raise();
            }
            catch (Exception e) when (e is not OutOfMemoryException)
            {
                // An event handler threw. Events are notifications: the client carries on, and so do the other handlers.
            }
        }
    }
}
