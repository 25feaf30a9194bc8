namespace Herald.LoadTest.Scenarios;

/// <summary>The <c>--repeat</c> loop the throughput scenarios share: one repetition after another, each with fresh connections.</summary>
internal static class Repetitions
{
    /// <summary>
    /// Runs <paramref name="once"/> <paramref name="repeat"/> times, printing each result, and stops early
    /// after an interrupted one. Returns the runs, or an exit code when a repetition could not be set up
    /// (null from <paramref name="once"/>): <see cref="ExitCodes.Interrupted"/> on Ctrl+C, else
    /// <see cref="ExitCodes.BrokerUnreachable"/>.
    /// </summary>
    public static async Task<(List<T> Runs, int? Exit)> RunAsync<T>(int repeat, Func<Task<T?>> once, Func<T, bool> interrupted, Action<T> print, CancellationToken cancellationToken)
        where T : class
    {
        var runs = new List<T>();
        for (int repetition = 1; repetition <= repeat; repetition++)
        {
            if (repeat > 1)
            {
                Console.WriteLine($"repetition {repetition} of {repeat}");
            }

            T? run = await once();
            if (run is null)
            {
                return (runs, cancellationToken.IsCancellationRequested ? ExitCodes.Interrupted : ExitCodes.BrokerUnreachable);
            }

            runs.Add(run);
            print(run);
            if (interrupted(run))
            {
                break;
            }
        }

        return (runs, null);
    }
}
