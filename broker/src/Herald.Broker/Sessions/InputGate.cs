namespace Herald.Broker.Sessions;

/// <summary>
/// Where a session's input enters the broker, so that shutdown can stop it between two operations (spec
/// §6.4): a transport wraps each piece of input it carries out (a TCP read batch, a long-poll publish) in
/// <see cref="TryEnter"/> and <see cref="Exit"/>; <see cref="CloseAsync"/> lets nothing more in and completes
/// when what was already in has finished. So when shutdown starts closing subscribers, no publication is
/// half routed: each one the broker took is queued to every matching subscriber, and nothing after it is taken.
/// </summary>
/// <remarks>
/// Threading: any thread. One session's gate is entered by its one caller (uncontended); the gate shared by
/// sessions outside the registry (long-poll's one-shot publishers) by their requests. Both sides use full
/// fences (a Dekker handshake): an input that entered before the close is waited for, one after it is refused.
/// </remarks>
internal sealed class InputGate
{
    private int _inside;
    private int _closed;
    private TaskCompletionSource? _idle;

    /// <summary>Whether <see cref="CloseAsync"/> was called: input stops at the next frame boundary.</summary>
    public bool IsClosed => Volatile.Read(ref _closed) != 0;

    /// <summary>Enters, unless the gate is closed. Pair a <c>true</c> with <see cref="Exit"/>.</summary>
    public bool TryEnter()
    {
        Interlocked.Increment(ref _inside);
        if (Volatile.Read(ref _closed) != 0)
        {
            Exit();
            return false;
        }

        return true;
    }

    public void Exit()
    {
        if (Interlocked.Decrement(ref _inside) == 0 && Volatile.Read(ref _closed) != 0)
        {
            _idle!.TrySetResult();
        }
    }

    /// <summary>Lets nothing more in; the task completes when the last input already in has exited.</summary>
    public Task CloseAsync()
    {
        var idle = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        if (Interlocked.CompareExchange(ref _idle, idle, null) is { } earlier)
        {
            return earlier.Task; // closed before
        }

        Interlocked.Exchange(ref _closed, 1);
        if (Volatile.Read(ref _inside) == 0)
        {
            idle.TrySetResult();
        }

        return idle.Task;
    }
}
