using System.Net;
using Herald.Broker.Monitoring;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Broker.Transports;
using Microsoft.AspNetCore.Builder;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace Herald.Broker.Hosting;

/// <summary>What the broker says once it listens: the settings nothing binds, what is open to the network, and where it listens.</summary>
internal static class HostStartup
{
    public static void LogWhenStarted(this WebApplication app, Listeners listeners, IReadOnlyList<UnknownKey> unknownKeys) =>
        app.Lifetime.ApplicationStarted.Register(() =>
        {
            HeraldOptions o = app.Services.GetRequiredService<IOptions<HeraldOptions>>().Value;
            ILogger log = app.Services.GetRequiredService<BrokerCore>().Log;
            IReadOnlyList<int> tcp = listeners.TcpPorts; // the ports bound: an ephemeral one (0) shows its number
            foreach (UnknownKey key in unknownKeys)
            {
                log.UnknownSetting(key.Path, HeraldOptionsValidator.DidYouMean(key));
            }

            WarnOfExposure(o, log);

            log.TcpListening(o.ServerName, o.Tcp.Host, tcp.Min(), tcp.Max());
            if (listeners.HttpPort is { } http)
            {
                log.HttpListening(o.Http.Host, http);
            }

            if (listeners.PolicyPort is { } policy)
            {
                log.PolicyListening(policy);
            }
            else if (listeners.PolicyUnavailable is { } reason)
            {
                log.PolicyPortDenied(o.Policy.Port, reason);
            }
        });

    /// <summary>
    /// The loud warnings: without authentication, a client listener beyond loopback lets anyone publish and
    /// subscribe to everything; an open monitoring listener beyond loopback shows every client and topic.
    /// Each says what it exposes.
    /// </summary>
    private static void WarnOfExposure(HeraldOptions o, ILogger log)
    {
        var exposed = new List<string>();
        bool anonymous = o.Security.Auth.Mode == AuthMode.None;
        if (anonymous && !IPAddress.IsLoopback(HostListeners.ParseHost(o.Tcp.Host)))
        {
            exposed.Add($"TCP {o.Tcp.Host} (publish, subscribe and answer requests on every topic)");
        }

        if (anonymous && o.Http.Port >= 0 && !IPAddress.IsLoopback(HostListeners.ParseHost(o.Http.Host)))
        {
            exposed.Add($"HTTP {o.Http.Host} (the same over long-poll)");
        }

        MonitoringOptions monitoring = o.Monitoring;
        bool monitoringOpen = monitoring.Port >= 0 && string.IsNullOrEmpty(monitoring.Token) && !IPAddress.IsLoopback(HostListeners.ParseHost(monitoring.Host));
        if (exposed.Count > 0)
        {
            if (monitoringOpen)
            {
                exposed.Add($"monitoring {monitoring.Host}:{monitoring.Port} (client names and addresses, every subscribed topic and inbox)");
            }

            log.OpenToTheNetwork(string.Join("; ", exposed));
        }
        else if (monitoringOpen)
        {
            log.MonitoringOpenToTheNetwork(monitoring.Host, monitoring.Port);
        }
    }
}
