using System.Globalization;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// What the scenarios written against <see cref="ITarget"/> share: opening many clients at once, closing
/// them, telling a setup failure from a bug, and printing headlines over <c>--repeat</c> repetitions.
/// </summary>
internal static class ScenarioClients
{
    private const int ParallelConnects = 64; // enough to hide the handshake round trips, few enough not to flood the accept queue

    /// <summary>
    /// A flow-controlled publisher's lead, kept at half of what the server queues per subscriber when the
    /// server says (<see cref="IPubSubClient.MaxPendingMessages"/>), so a run measures delivery and not the
    /// server's slow-consumer policy. Prints the change.
    /// </summary>
    public static long LeadWithin(long lead, IEnumerable<IPubSubClient> receivers)
    {
        if (receivers.Select(c => c.MaxPendingMessages).Where(m => m is not null).Min() is { } limit && limit / 2 < lead)
        {
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"max lead lowered from {lead:N0} to {Math.Max(1, limit / 2):N0}: half of what the server queues per subscriber ({limit:N0})"));
            return Math.Max(1, limit / 2);
        }

        return lead;
    }

    /// <summary>
    /// Opens clients <paramref name="firstIndex"/> .. <paramref name="firstIndex"/> + <paramref name="count"/> - 1
    /// (the index spreads them over the target's ports), each with <paramref name="connect"/> when given (a
    /// client of another kind, e.g. another identity), else <see cref="ITarget.ConnectAsync"/>. On failure
    /// closes those already open and rethrows.
    /// </summary>
    public static async Task<IPubSubClient[]> ConnectAsync(ITarget target, int firstIndex, int count, CancellationToken cancellationToken, Func<int, CancellationToken, Task<IPubSubClient>>? connect = null)
    {
        connect ??= target.ConnectAsync;
        var clients = new IPubSubClient?[count];
        try
        {
            await Parallel.ForAsync(0, count, new ParallelOptions { MaxDegreeOfParallelism = ParallelConnects, CancellationToken = cancellationToken }, async (i, token) =>
                clients[i] = await connect(firstIndex + i, token));
        }
        catch
        {
            await DisposeAllAsync(clients);
            throw;
        }

        return [.. clients.Select(c => c!)];
    }

    /// <summary>Subscribes every client at once, with <paramref name="subscribe"/>(client index).</summary>
    public static Task SubscribeAllAsync(int count, Func<int, CancellationToken, Task> subscribe, CancellationToken cancellationToken) =>
        Parallel.ForAsync(0, count, new ParallelOptions { MaxDegreeOfParallelism = ParallelConnects, CancellationToken = cancellationToken }, async (i, token) => await subscribe(i, token));

    /// <summary>Closes every client, ignoring how each one ends; bounded by the clients' own close.</summary>
    public static async Task DisposeAllAsync(IEnumerable<IPubSubClient?> clients)
    {
        List<Task> closing = [];
        foreach (IPubSubClient? client in clients)
        {
            if (client is not null)
            {
                closing.Add(Task.Run(async () => await client.DisposeAsync()));
            }
        }

        await RunState.WaitQuietlyAsync(Task.WhenAll(closing), TimeSpan.FromSeconds(5));
    }

    /// <summary>The ways connecting and subscribing fail when the target is not there or not well.</summary>
    public static bool IsSetupFailure(Exception e) => RunState.IsSetupFailure(e) || e is TargetUnavailableException || e is AggregateException { InnerExceptions: var inner } && inner.All(IsSetupFailure);

    /// <summary>One line per headline: median, and the spread with several repetitions.</summary>
    public static void PrintHeadlines(IEnumerable<Headline> headlines)
    {
        foreach (Headline h in headlines)
        {
            string spread = h.Repetitions < 2 ? "" : string.Create(CultureInfo.InvariantCulture, $"  (median of {h.Repetitions}; min {h.Min:N1}, max {h.Max:N1}, spread {100 * h.Spread:F1} %)");
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"  {h.Name,-20}: {h.Value:N1} {(h.HigherIsBetter ? "(higher is better)" : "(lower is better)")}{spread}"));
        }
    }
}
