using System.Net;
using System.Net.Sockets;
using Herald.Broker.Monitoring;
using Herald.Broker.Policy;
using Herald.Broker.Security;
using Herald.Broker.Transports;
using Herald.Broker.Transports.Tcp;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;

namespace Herald.Broker.Hosting;

/// <summary>
/// What the broker listens on, from the options validated before anything listens (Kestrel needs the port range
/// while it is being built): every TCP port of the range, the HTTP port, the policy port and the monitoring port,
/// each recorded in <see cref="Listeners"/> by role, with TLS where configured and the socket limits that bound what a
/// connection can hold.
/// </summary>
internal static class HostListeners
{
    /// <summary>The sockets (their memory and send buffers) and Kestrel's listeners and limits.</summary>
    public static void AddListeners(this WebApplicationBuilder builder, HeraldOptions preview, Listeners listeners)
    {
        IServiceCollection services = builder.Services;
        services.Configure<HostOptions>(host => host.ShutdownTimeout = preview.Monitoring.DrainDelay + preview.Limits.ShutdownDrainTimeout + TimeSpan.FromSeconds(5));
        // Kestrel takes its socket memory from the one IMemoryPoolFactory registered: blocks of SocketBlockBytes (Transports/SocketBlockPool.cs).
        services.AddSingleton<IMemoryPoolFactory<byte>>(new SocketBlockPoolFactory(preview.Limits.SocketBlockBytes, preview.Limits.SocketBlocksRetainedBytes));
        SocketIoLoops.Use(preview.Tcp.IoLoops);
        builder.WebHost.UseSockets(sockets =>
        {
            sockets.UnsafePreferInlineScheduling = preview.Tcp.InlineScheduling;
            // How far the socket reads ahead of what the frame reader has looked at (the input pipe counts
            // unexamined bytes): a connection held back (rates, replies) or refused budget holds no more than
            // this; a frame being received is the reader's, bounded by the allowance or the shared budget.
            sockets.MaxReadBufferSize = preview.Limits.PartialFrameAllowance;
            int sendBuffer = preview.Tcp.SendBufferBytes;
            sockets.CreateBoundListenSocket = endpoint =>
            {
                Socket socket = listeners.Bind(endpoint); // a taken port names its setting (Program prints it)
                if (sendBuffer > 0)
                {
                    socket.SendBufferSize = sendBuffer; // accepted sockets inherit it: what a stalled peer holds in the kernel is bounded
                }

                return socket;
            };
        });
        builder.WebHost.ConfigureKestrel(kestrel => Listen(kestrel, preview, listeners));
    }

    /// <summary>A host name from the options as an address (validated before use).</summary>
    public static IPAddress ParseHost(string host) => HeraldOptionsValidator.TryParseHost(host, out IPAddress parsed) ? parsed : IPAddress.None;

    private static void Listen(KestrelServerOptions kestrel, HeraldOptions preview, Listeners listeners)
    {
        kestrel.AddServerHeader = false;
        IPAddress address = ParseHost(preview.Tcp.Host);
        TlsOptions tls = preview.Security.Tls;
        CertificateSource? certificates = tls.Enabled ? new CertificateSource(tls) : null;
        for (int port = preview.Tcp.PortRangeStart; port <= preview.Tcp.PortRangeEnd; port++)
        {
            listeners.Configured(port, "Herald:Tcp:PortRangeStart..PortRangeEnd");
            bool secure = certificates is not null && tls.IsTlsPort(port);
            kestrel.Listen(address, port, listen =>
            {
                listen.Protocols = HttpProtocols.None;
                if (secure)
                {
                    UseTls(listen, certificates!, tls); // TLS first, then the same protocol core
                }

                listen.UseConnectionHandler<TcpConnectionHandler>();
                listeners.Tcp.Add(listen);
            });
        }

        if (preview.Http.Port >= 0)
        {
            listeners.Configured(preview.Http.Port, "Herald:Http:Port");
            kestrel.Listen(ParseHost(preview.Http.Host), preview.Http.Port, listen =>
            {
                listen.Protocols = HttpProtocols.Http1; // long polls are HTTP/1.1 requests
                if (certificates is not null && tls.Http)
                {
                    UseTls(listen, certificates, tls);
                }

                listeners.Http = listen;
            });
        }

        if (preview.Policy.Port >= 0)
        {
            if (Listeners.CanBind(address, preview.Policy.Port, out string? reason))
            {
                listeners.Configured(preview.Policy.Port, "Herald:Policy:Port");
                kestrel.Listen(address, preview.Policy.Port, listen =>
                {
                    listen.Protocols = HttpProtocols.None;
                    listen.UseConnectionHandler<SocketPolicyHandler>();
                    listeners.Policy = listen;
                });
            }
            else
            {
                listeners.PolicyUnavailable = reason; // the broker runs without it, and says so
            }
        }

        // The operations endpoints (probes, /metrics, /varz, /connz, /subsz) on their own listener, plain
        // HTTP, loopback by default: MonitoringAccess keeps them off the client port and the client routes off it.
        MonitoringOptions monitoring = preview.Monitoring;
        if (monitoring.Port >= 0)
        {
            listeners.Configured(monitoring.Port, "Herald:Monitoring:Port");
            kestrel.Listen(ParseHost(monitoring.Host), monitoring.Port, listen =>
            {
                listen.Protocols = HttpProtocols.Http1;
                listeners.Monitoring = listen;
            });
        }

        // The server API on its own listener, plain HTTP, loopback by default, only when a key is configured:
        // ApiAccess keeps it to the API routes and the API routes to it.
        Api.ApiOptions api = preview.Api;
        if (api.Enabled)
        {
            listeners.Configured(api.Port, "Herald:Api:Port");
            kestrel.Listen(ParseHost(api.Host), api.Port, listen =>
            {
                listen.Protocols = HttpProtocols.Http1;
                listeners.Api = listen;
            });
        }

        // Kestrel's request-header timeout and minimum data rates stay at their defaults (slowloris);
        // bodies are capped per request by the long-poll endpoints.
        kestrel.Limits.MaxRequestBodySize = preview.LongPoll.MaxBodyBytes;
        kestrel.Limits.RequestHeadersTimeout = preview.Http.RequestHeadersTimeout;
    }

    private static void UseTls(ListenOptions listen, CertificateSource certificates, TlsOptions tls) =>
        listen.UseHttps(https =>
        {
            https.ServerCertificateSelector = (_, _) => certificates.Current; // reloaded when the file changes
            https.SslProtocols = System.Security.Authentication.SslProtocols.Tls12 | System.Security.Authentication.SslProtocols.Tls13;
            https.HandshakeTimeout = tls.HandshakeTimeout;
        });
}
