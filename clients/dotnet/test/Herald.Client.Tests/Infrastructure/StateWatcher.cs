using Herald.Client;

namespace Herald.Client.Tests.Infrastructure;

/// <summary>Records a client's <see cref="HeraldClient.StateChanged"/> events and lets a test wait for the n-th entry into a state.</summary>
public sealed class StateWatcher
{
    private readonly Lock _gate = new();
    private readonly List<ConnectionStateChangedEventArgs> _changes = [];
    private readonly List<(ConnectionState State, int Occurrence, TaskCompletionSource<ConnectionStateChangedEventArgs> Done)> _waiters = [];

    public StateWatcher(HeraldClient client) => client.StateChanged += OnChanged;

    public IReadOnlyList<ConnectionState> History
    {
        get
        {
            lock (_gate)
            {
                return [.. _changes.Select(c => c.Current)];
            }
        }
    }

    /// <summary>Completes when the client has entered <paramref name="state"/> for the <paramref name="occurrence"/>-th time (already, or later).</summary>
    public Task<ConnectionStateChangedEventArgs> WaitForAsync(ConnectionState state, int occurrence = 1)
    {
        lock (_gate)
        {
            ConnectionStateChangedEventArgs[] seen = [.. _changes.Where(c => c.Current == state)];
            if (seen.Length >= occurrence)
            {
                return Task.FromResult(seen[occurrence - 1]);
            }

            var done = new TaskCompletionSource<ConnectionStateChangedEventArgs>(TaskCreationOptions.RunContinuationsAsynchronously);
            _waiters.Add((state, occurrence, done));
            return done.Task.WaitAsync(TimeSpan.FromSeconds(20)); // a hang guard, not a timing assertion
        }
    }

    private void OnChanged(object? sender, ConnectionStateChangedEventArgs change)
    {
        lock (_gate)
        {
            _changes.Add(change);
            int count = _changes.Count(c => c.Current == change.Current);
            foreach (var waiter in _waiters.Where(w => w.State == change.Current && w.Occurrence == count).ToList())
            {
                waiter.Done.TrySetResult(change);
                _waiters.Remove(waiter);
            }
        }
    }
}
