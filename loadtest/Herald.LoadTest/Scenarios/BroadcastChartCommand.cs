using System.CommandLine;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>chart</c>: draws the broadcast chart (M against P, one line per target) from one or more
/// <c>broadcast --out</c> result files, so runs against several targets appear on one chart.
/// </summary>
internal sealed class BroadcastChartCommand : IScenario
{
    public string Name => "chart";

    private static readonly Option<string> In = new("--in")
    {
        Description = "broadcast result files (one or more, comma-separated)",
        HelpName = "A.json,B.json",
        Required = true,
    };

    private static readonly Option<string> Out = OptionKinds.Text("out", "loadtest/results/broadcast", "PATH", "write PATH.svg and PATH.png");

    public string Description => """
        Draw M against P from broadcast result files (SVG and PNG).
        The broadcast chart from result files written by `broadcast --out`: the largest M with every burst on
        time against the period P, one line per file (labelled with its target, e.g. herald/tcp).
        Example: chart --in herald-tcp.json,nats.json,redis.json --out loadtest/results/broadcast
        """;

    public IReadOnlyList<Option> Options { get; } = [In, Out];

    /// <exception cref="UsageException"><c>--in</c> names no file.</exception>
    public CommandSettings Read(ParseResult parsed)
    {
        ArgumentNullException.ThrowIfNull(parsed);
        string[] inputs = parsed.GetRequiredValue(In).Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        return inputs.Length == 0 ? throw new UsageException("--in names no file.") : new(new ChartSettings(inputs, parsed.GetRequiredValue(Out)), null);
    }

    public Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        (IReadOnlyList<string> inputs, string output) = (ChartSettings)Read(parsed).Scenario;
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
