using System.Net;
using Herald.Broker.Monitoring;
using Microsoft.Extensions.Configuration;

namespace Herald.Broker.Hosting;

/// <summary>
/// <c>Herald.Broker --probe [URL or path]</c>: one HTTP GET, exit code 0 for a 2xx answer, 1 otherwise. The
/// container HEALTHCHECK runs it, since chiseled images have no shell or curl. Without a URL it asks
/// <c>/healthz</c> on the monitoring listener of the same configuration the broker reads (appsettings.json,
/// <c>Herald__Monitoring__Port</c>, <c>--Herald:Monitoring:Port=</c>), or on the HTTP port when the monitoring
/// listener is off and the probes are served there; a path (<c>/readyz</c>) goes to the same place.
/// </summary>
internal static class HealthProbe
{
    public const string Argument = "--probe";

    private static readonly TimeSpan Timeout = TimeSpan.FromSeconds(3);

    public static async Task<int> RunAsync(string[] args)
    {
        string? target = args.Length > 1 && !args[1].StartsWith("--", StringComparison.Ordinal) ? args[1] : null;
        Uri? url = Resolve(target, args);
        if (url is null)
        {
            await Console.Error.WriteLineAsync($"probe: cannot tell where to probe ('{target}', monitoring listener off?)").ConfigureAwait(false);
            return 1;
        }

        using var handler = new SocketsHttpHandler { UseProxy = false, ConnectTimeout = Timeout };
        using var http = new HttpClient(handler) { Timeout = Timeout };
        try
        {
            using HttpResponseMessage response = await http.GetAsync(url).ConfigureAwait(false);
            await Console.Out.WriteLineAsync($"probe: {url} {(int)response.StatusCode}").ConfigureAwait(false);
            return response.IsSuccessStatusCode ? 0 : 1;
        }
        catch (Exception e) when (e is HttpRequestException or TaskCanceledException)
        {
            await Console.Error.WriteLineAsync($"probe: {url} {e.Message}").ConfigureAwait(false);
            return 1;
        }
    }

    private static Uri? Resolve(string? target, string[] args)
    {
        if (target is not null && Uri.TryCreate(target, UriKind.Absolute, out Uri? absolute) && absolute.Scheme is "http" or "https")
        {
            return absolute;
        }

        IConfigurationRoot configuration = new ConfigurationBuilder()
            .SetBasePath(AppContext.BaseDirectory)
            .AddJsonFile("appsettings.json", optional: true)
            .AddEnvironmentVariables()
            .AddCommandLine(args.Where(a => a.StartsWith("--", StringComparison.Ordinal) && a.Contains('=', StringComparison.Ordinal)).ToArray())
            .Build();
        IConfigurationSection herald = configuration.GetSection(HeraldOptions.Section);
        var monitoring = new MonitoringOptions();
        herald.GetSection("Monitoring").Bind(monitoring);
        var http = new HttpOptions();
        herald.GetSection("Http").Bind(http);
        (string host, int port) = monitoring.Port > 0 ? (monitoring.Host, monitoring.Port)
            : monitoring.Port < 0 && monitoring.ProbesOnHttpPort ? (http.Host, http.Port)
            : (monitoring.Host, 0);
        if (port <= 0 || !HeraldOptionsValidator.TryParseHost(host, out IPAddress address))
        {
            return null;
        }

        // A wildcard bind is reached on loopback.
        if (address.Equals(IPAddress.Any))
        {
            address = IPAddress.Loopback;
        }
        else if (address.Equals(IPAddress.IPv6Any))
        {
            address = IPAddress.IPv6Loopback;
        }

        string path = string.IsNullOrEmpty(target) ? "/healthz" : target.StartsWith('/') ? target : "/" + target;
        return new UriBuilder(Uri.UriSchemeHttp, address.ToString(), port, path).Uri;
    }
}
