using Herald.Broker.Engines.PollSharing;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// The leases of the shared sessions this node owns (spec cluster.md §10), renewed every heartbeat: a session whose
/// lease another node took is let go here, and each learns what the other nodes saw of its client.
/// </summary>
internal sealed class LeaseRenewal(PollSessionStore store)
{
    /// <summary>Keeps the leases of the shared sessions this node owns, every heartbeat (a member's interval).</summary>
    public async Task RunAsync(ISharedSessions shared, CancellationToken stoppingToken)
    {
        using var timer = new PeriodicTimer(shared.RenewEvery);
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false))
            {
                await Task.WhenAll(store.Sessions.Where(s => s.Shared.IsShared).Select(s => s.RenewAsync())).ConfigureAwait(false);
            }
        }
        catch (OperationCanceledException)
        {
            // stopping
        }
    }
}
