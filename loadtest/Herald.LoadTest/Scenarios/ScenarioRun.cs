using System.Text.Json;
using Herald.LoadTest.Reporting;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// A repetition that checks every delivery itself (<c>stream</c>, <c>collab</c>): besides its own figures,
/// what every such run records: the deliveries expected, received, missing and out of order, the CPU and
/// memory it used, the server's RSS at its end, whether Ctrl+C ended it, and what failed. Not
/// thread-safe: the run's own task fills it, the skeleton reads it afterwards.
/// </summary>
internal abstract class ScenarioRun : IScenarioRun
{
    public long Expected { get; protected set; }

    public long Received { get; protected set; }

    public long Missing => Math.Max(0, Expected - Received);

    /// <summary>Deliveries that arrived twice or out of order.</summary>
    public long OutOfOrder { get; protected set; }

    public ResourceUsage Usage { get; protected set; }

    public long? ServerRss { get; protected set; }

    public bool Interrupted { get; protected set; }

    public List<string> Failures { get; } = [];

    IReadOnlyList<string> IScenarioRun.Failures => Failures;

    public abstract void Write(Utf8JsonWriter json);

    /// <summary>Writes the deliveries: expected, received, missing, out of order.</summary>
    protected void WriteDeliveries(Utf8JsonWriter json)
    {
        json.WriteNumber("expected", Expected);
        json.WriteNumber("received", Received);
        json.WriteNumber("missing", Missing);
        json.WriteNumber("outOfOrder", OutOfOrder);
    }

    /// <summary>Writes the usage, the server's RSS when known, and whether it was interrupted.</summary>
    protected void WriteUsage(Utf8JsonWriter json)
    {
        Usage.Write(json);
        if (ServerRss is { } rss)
        {
            json.WriteNumber("serverRssBytes", rss);
        }

        json.WriteBoolean("interrupted", Interrupted);
    }
}
