namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>chart</c>: draws the broadcast chart (M against P, one line per target) from one or more
/// <c>broadcast --out</c> result files, so runs against several targets appear on one chart.
/// </summary>
internal sealed class BroadcastChartCommand : IScenario
{
    public string Name => "chart";

    public string Summary => "Draw M against P from broadcast result files (SVG and PNG).";

    public string Usage => """
        chart: the broadcast chart from result files written by `broadcast --out`: the largest M with every
        burst on time against the period P, one line per file (labelled with its target, e.g. herald/tcp).

          --in A.json,B.json     broadcast result files (one or more, comma-separated)
          --out PATH             write PATH.svg and PATH.png (default loadtest/results/broadcast)

        Example:
          chart --in herald-tcp.json,nats.json,redis.json --out loadtest/results/broadcast
        """;

    /// <exception cref="UsageException">No <c>--in</c> file.</exception>
    public static ChartSettings Read(CommandLine commandLine)
    {
        ArgumentNullException.ThrowIfNull(commandLine);
        string[] inputs = (commandLine.OptionalString("in") ?? throw new UsageException("--in is required: one or more broadcast result files."))
            .Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        string output = commandLine.String("out", "loadtest/results/broadcast");
        return inputs.Length == 0 ? throw new UsageException("--in names no file.") : new ChartSettings(inputs, output);
    }

    public Task<int> RunAsync(CommandLine commandLine, CancellationToken cancellationToken)
    {
        (IReadOnlyList<string> inputs, string output) = Read(commandLine);
        commandLine.RejectUnused();
        var series = new List<BroadcastSeries>();
        foreach (string input in inputs)
        {
            BroadcastSeries s = BroadcastChart.Read(input);
            series.Add(s);
            Console.WriteLine($"{s.Label,-24} {BroadcastChart.Describe(s)}   ({input})");
        }

        (string svg, string png) = BroadcastChart.Write(output, series);
        Console.WriteLine($"chart written to {svg} and {png}");
        return Task.FromResult(ExitCodes.Ok);
    }
}

/// <summary>What <c>chart</c> draws: the broadcast result files, and the path of the SVG and PNG.</summary>
internal sealed record ChartSettings(IReadOnlyList<string> In, string Out);
