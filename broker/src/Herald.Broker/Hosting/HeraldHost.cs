using System.Net;
using System.Net.Sockets;
using Herald.Broker.Routing;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Broker.Cluster;
using Herald.Broker.History;
using Herald.Broker.Compression;
using Herald.Broker.Monitoring;
using Herald.Broker.Policy;
using Herald.Broker.Transports;
using Herald.Broker.Transports.LongPoll;
using Herald.Broker.Transports.Sse;
using Herald.Broker.Transports.WebSockets;
using Herald.Broker.Transports.Tcp;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Routing;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace Herald.Broker.Hosting;

/// <summary>Builds the broker's host: configuration, services and Kestrel listeners. Used by Program and by tests.</summary>
public static class HeraldHost
{
    /// <summary>
    /// Creates the broker application. <paramref name="configure"/> lets tests and embedders override
    /// options after configuration is bound (it runs before validation).
    /// </summary>
    private static void UseTls(ListenOptions listen, CertificateSource certificates, TlsOptions tls) =>
        listen.UseHttps(https =>
        {
            https.ServerCertificateSelector = (_, _) => certificates.Current; // reloaded when the file changes
            https.SslProtocols = System.Security.Authentication.SslProtocols.Tls12 | System.Security.Authentication.SslProtocols.Tls13;
            https.HandshakeTimeout = tls.HandshakeTimeout;
        });

    private static IPAddress ParseHost(string host) => HeraldOptionsValidator.TryParseHost(host, out IPAddress parsed) ? parsed : IPAddress.None; // validated before use

    /// <summary>
    /// Builds the broker. <paramref name="configure"/> runs after configuration is bound;
    /// <paramref name="overrides"/> runs after every service is registered, so a host embedding the broker
    /// (the test suites) can replace one (as <c>ConfigureTestServices</c> does).
    /// </summary>
    public static WebApplication Build(string[] args, Action<HeraldOptions>? configure = null, Action<IServiceCollection>? overrides = null)
    {
        WebApplicationBuilder builder = WebApplication.CreateSlimBuilder(new WebApplicationOptions
        {
            Args = args,
            ContentRootPath = AppContext.BaseDirectory,
        });

        IServiceCollection services = builder.Services;
        OptionsBuilder<HeraldOptions> options = services.AddOptions<HeraldOptions>()
            .Bind(builder.Configuration.GetSection(HeraldOptions.Section))
            .ValidateOnStart();
        if (configure is not null)
        {
            options.PostConfigure(configure);
        }

        services.AddSingleton<IValidateOptions<HeraldOptions>, HeraldOptionsValidator>();
        services.AddMetrics();
        services.AddSingleton(sp => new BrokerMetrics(sp.GetRequiredService<System.Diagnostics.Metrics.IMeterFactory>())
        {
            Topics = sp.GetRequiredService<MonitoringOptions>().Enabled ? new TopicTraffic() : null, // the status page's top topics
        });

        // Each room gets its own options (and nothing of the rooms above it): see broker/ARCHITECTURE.md.
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Limits);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.LongPoll);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Policy);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Security);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Compression);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Monitoring);
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Sse);
        services.AddSingleton(sp => new TopicRouter(sp.GetRequiredService<BrokerMetrics>(), sp.GetRequiredService<LimitOptions>().MaxTopics));
        services.AddSingleton(TimeProvider.System);
        services.AddSingleton<ICpuLoad, ProcessCpuLoad>();
        services.AddSingleton(sp => new CompressionAdvisor(sp.GetRequiredService<CompressionOptions>(), sp.GetRequiredService<ICpuLoad>(), sp.GetRequiredService<TimeProvider>()));
        services.AddSingleton<CompressionMetrics>();
        services.AddSingleton(sp => new MessageEncoder(sp.GetRequiredService<CompressionAdvisor>(), sp.GetRequiredService<CompressionMetrics>(), sp.GetRequiredService<CompressionOptions>()));
        services.AddSingleton<Authenticator>();
        services.AddSingleton(sp =>
        {
            LoggingOptions logging = sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Logging;
            return new ClientFaultLog(sp.GetRequiredService<ILogger<BrokerCore>>(), logging.ClientFaultsPerInterval, logging.ClientFaultInterval, sp.GetRequiredService<TimeProvider>());
        });
        services.AddSingleton(sp => sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Cluster);
        services.AddSingleton(sp =>
        {
            ClusterOptions cluster = sp.GetRequiredService<ClusterOptions>();
            if (!cluster.Enabled)
            {
                return new ClusterSlot(null);
            }

            var engine = new ClusterEngine(cluster, sp.GetRequiredService<IOptions<HeraldOptions>>().Value.ServerName, sp.GetRequiredService<TopicRouter>(), sp.GetRequiredService<MessageEncoder>(), sp.GetRequiredService<BrokerMetrics>(), sp.GetRequiredService<LimitOptions>().MaxPayloadBytes, sp.GetRequiredService<LimitOptions>().MaxFrameBytes, sp.GetRequiredService<ILogger<ClusterEngine>>(), sp.GetRequiredService<System.Diagnostics.Metrics.IMeterFactory>(), sp.GetRequiredService<HistorySlot>().Store);
            return new ClusterSlot(engine);
        });

        // Started before the sessions' registry and stopped after it: what the drained sessions publish is still sent on.
        services.AddHostedService(sp => new ClusterLifetime(sp.GetRequiredService<ClusterSlot>().Engine));
        services.AddSingleton(sp =>
        {
            HistoryOptions history = sp.GetRequiredService<IOptions<HeraldOptions>>().Value.History;
            if (!history.Enabled)
            {
                return new HistorySlot(null);
            }

            var store = new HistoryStore(history) { Shared = sp.GetRequiredService<IOptions<HeraldOptions>>().Value.Cluster.Enabled };
            HistoryMetrics.Observe(sp.GetRequiredService<System.Diagnostics.Metrics.IMeterFactory>(), store);
            return new HistorySlot(store);
        });
        services.AddSingleton(sp => new BrokerCore(
            sp.GetRequiredService<IOptions<HeraldOptions>>().Value.ServerName,
            sp.GetRequiredService<LimitOptions>(),
            sp.GetRequiredService<SecurityOptions>(),
            sp.GetRequiredService<TopicRouter>(),
            sp.GetRequiredService<MessageEncoder>(),
            sp.GetRequiredService<Authenticator>(),
            sp.GetRequiredService<BrokerMetrics>(),
            sp.GetRequiredService<ClientFaultLog>(),
            sp.GetRequiredService<ClusterSlot>().Engines,
            sp.GetRequiredService<HistorySlot>().Store));
        services.AddSingleton(sp => new SessionRegistry(sp.GetRequiredService<BrokerCore>(), SweepPeriod(sp.GetRequiredService<IOptions<HeraldOptions>>().Value)));
        services.AddHostedService(sp => sp.GetRequiredService<SessionRegistry>());
        services.AddSingleton<PollSessionStore>();
        services.AddHostedService(sp => sp.GetRequiredService<PollSessionStore>());
        services.AddSingleton(sp =>
        {
            HeraldOptions o = sp.GetRequiredService<IOptions<HeraldOptions>>().Value;
            return new PolicyDocuments(o.Policy, o.Tcp.PortRangeStart, o.Tcp.PortRangeEnd, sp.GetRequiredService<Listeners>());
        });
        var listeners = new Listeners();
        services.AddSingleton(listeners);

        // Kestrel needs the port range while it is being built, so the options are bound and validated
        // here as well: a bad configuration fails before anything listens, with every problem listed.
        // Keys the binder would ignore (typos) are found here too: a warning at start, or with StrictConfiguration a failure.
        var preview = new HeraldOptions();
        IConfigurationSection section = builder.Configuration.GetSection(HeraldOptions.Section);
        try
        {
            section.Bind(preview);
        }
        catch (InvalidOperationException e)
        {
            // "Failed to convert configuration value 'x' at 'Herald:Tcp:PortRangeEnd' to type 'System.Int32'.": said as a validation failure, not a stack.
            throw new OptionsValidationException(HeraldOptions.Section, typeof(HeraldOptions), [e.Message]);
        }

        configure?.Invoke(preview);
        IReadOnlyList<UnknownKey> unknownKeys = ConfigurationKeys.Unknown<HeraldOptions>(section);
        HeraldOptionsValidator.ThrowIfInvalid(preview, unknownKeys);
        builder.AddHeraldOperations(preview); // logs, metrics, traces, health, monitoring

        services.Configure<HostOptions>(host => host.ShutdownTimeout = preview.Monitoring.DrainDelay + preview.Limits.ShutdownDrainTimeout + TimeSpan.FromSeconds(5));
        // Kestrel takes its socket memory from the one IMemoryPoolFactory registered: blocks of SocketBlockBytes (Transports/SocketBlockPool.cs).
        services.AddSingleton<IMemoryPoolFactory<byte>>(new SocketBlockPoolFactory(preview.Limits.SocketBlockBytes, preview.Limits.SocketBlocksRetainedBytes));
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
        builder.WebHost.ConfigureKestrel(kestrel =>
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

            // Kestrel's request-header timeout and minimum data rates stay at their defaults (slowloris);
            // bodies are capped per request by the long-poll endpoints.
            kestrel.Limits.MaxRequestBodySize = preview.LongPoll.MaxBodyBytes;
            kestrel.Limits.RequestHeadersTimeout = preview.Http.RequestHeadersTimeout;
        });
        services.AddClientCors(preview.Policy.AllowedDomains);

        overrides?.Invoke(services);
        WebApplication app = builder.Build();
        app.UseMiddleware<MonitoringAccess>(); // after routing (added first by the host), before CORS
        app.UseCors();
        app.UseWebSockets(); // /ws (Transports/WebSockets); never permessage-deflate: payloads are Zstd where it pays
        RouteGroupBuilder clients = app.MapGroup("");
        clients.RequireCors(ClientCors.Policy);
        clients.MapLongPoll();
        clients.MapWebSocket();
        clients.MapSse();
        clients.MapPolicyFiles();
        app.MapHeraldOperations(preview);
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
        return app;
    }

    /// <summary>
    /// The loud warnings: without authentication, a client listener beyond loopback lets anyone publish and
    /// subscribe to everything; an open monitoring listener beyond loopback shows every client and topic.
    /// Each says what it exposes.
    /// </summary>
    private static void WarnOfExposure(HeraldOptions o, ILogger log)
    {
        var exposed = new List<string>();
        bool anonymous = o.Security.Auth.Mode == AuthMode.None;
        if (anonymous && !IPAddress.IsLoopback(ParseHost(o.Tcp.Host)))
        {
            exposed.Add($"TCP {o.Tcp.Host} (publish, subscribe and answer requests on every topic)");
        }

        if (anonymous && o.Http.Port >= 0 && !IPAddress.IsLoopback(ParseHost(o.Http.Host)))
        {
            exposed.Add($"HTTP {o.Http.Host} (the same over long-poll)");
        }

        MonitoringOptions monitoring = o.Monitoring;
        bool monitoringOpen = monitoring.Port >= 0 && string.IsNullOrEmpty(monitoring.Token) && !IPAddress.IsLoopback(ParseHost(monitoring.Host));
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

    /// <summary>How often the registry checks every session's liveness: a quarter of the shortest timeout of any transport, between 5 ms and 1 s.</summary>
    private static TimeSpan SweepPeriod(HeraldOptions options)
    {
        TimeSpan shortest = new[] { options.Limits.HandshakeTimeout, options.Limits.PingInterval, options.Limits.FrameGracePeriod, options.LongPoll.InactivityTimeout }.Min();
        return TimeSpan.FromMilliseconds(Math.Clamp(shortest.TotalMilliseconds / 4, 5, 1000));
    }
}
