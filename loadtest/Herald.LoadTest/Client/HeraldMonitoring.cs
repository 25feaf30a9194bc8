using System.Globalization;
using System.Text.Json;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Client;

/// <summary>
/// Herald's <c>/varz</c>, read from its monitoring listener (<c>--monitoring-port</c>, loopback and no token
/// when the tool starts the broker): what the broker itself counts, for the figures a client cannot see
/// (its GC heap, slow consumers, drops, connections it closed).
/// </summary>
internal static class HeraldMonitoring
{
    private static readonly HttpClient Http = new() { Timeout = TimeSpan.FromSeconds(5) };

    /// <summary>The parsed <c>/varz</c>; null for a target that is not Herald, or when monitoring does not answer.</summary>
    public static async Task<JsonDocument?> VarzAsync(ITarget target, CancellationToken cancellationToken)
    {
        return target is HeraldTarget herald ? await VarzAsync(herald.Endpoints.Host, herald.MonitoringPort, cancellationToken) : null;
    }

    /// <summary>The parsed <c>/varz</c> of the broker whose monitoring listener is <paramref name="host"/>:<paramref name="port"/>; null when it does not answer.</summary>
    public static async Task<JsonDocument?> VarzAsync(string host, int port, CancellationToken cancellationToken)
    {
        try
        {
            return JsonDocument.Parse(await Http.GetStringAsync(
                new Uri($"http://{host}:{port.ToString(CultureInfo.InvariantCulture)}/varz"), cancellationToken));
        }
        catch (Exception e) when (e is HttpRequestException or JsonException or TaskCanceledException or InvalidOperationException)
        {
            return null;
        }
    }

    /// <summary>
    /// <c>/varz</c>'s number at <paramref name="path"/> summed over the target's brokers (one, or a cluster's nodes), e.g. the
    /// GC heap; null for a target that is not Herald, or when a broker does not answer or does not say.
    /// </summary>
    public static async Task<long?> SumAsync(ITarget target, CancellationToken cancellationToken, params string[] path)
    {
        (string Host, int Port)[] monitors = target switch
        {
            HeraldTarget herald => [(herald.Endpoints.Host, herald.MonitoringPort)],
            ClusterTarget cluster => [.. cluster.Nodes.Select(node => (node.Endpoints.Host, node.MonitoringPort))],
            _ => [],
        };
        long? sum = null;
        foreach ((string host, int port) in monitors)
        {
            using JsonDocument? varz = await VarzAsync(host, port, cancellationToken);
            if (Number(varz, path) is not { } value)
            {
                return null;
            }

            sum = (sum ?? 0) + value;
        }

        return sum;
    }

    /// <summary><c>/varz</c>'s number at <paramref name="path"/> (e.g. <c>process</c>, <c>gc_heap_bytes</c>), or null when it is not there.</summary>
    public static long? Number(JsonDocument? varz, params ReadOnlySpan<string> path)
    {
        if (varz is null)
        {
            return null;
        }

        JsonElement element = varz.RootElement;
        foreach (string name in path)
        {
            if (element.ValueKind != JsonValueKind.Object || !element.TryGetProperty(name, out element))
            {
                return null;
            }
        }

        return element.ValueKind == JsonValueKind.Number && element.TryGetInt64(out long value) ? value : null;
    }
}
