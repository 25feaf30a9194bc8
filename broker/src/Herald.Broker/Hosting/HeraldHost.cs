using System.Net;
using Herald.Broker.Routing;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Broker.Transports.Tcp;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Server.Kestrel.Core;
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
    public static WebApplication Build(string[] args, Action<HeraldOptions>? configure = null)
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
        services.AddSingleton<BrokerMetrics>();
        services.AddSingleton<TopicRouter>();
        services.AddSingleton<BrokerCore>();
        services.AddSingleton<SessionRegistry>();
        services.AddHostedService(sp => sp.GetRequiredService<SessionRegistry>());

        // Kestrel needs the port range while it is being built, so the options are bound and validated
        // here as well: a bad configuration fails before anything listens, with every problem listed.
        var preview = new HeraldOptions();
        builder.Configuration.GetSection(HeraldOptions.Section).Bind(preview);
        configure?.Invoke(preview);
        HeraldOptionsValidator.ThrowIfInvalid(preview);

        services.Configure<HostOptions>(host => host.ShutdownTimeout = preview.Limits.ShutdownDrainTimeout + TimeSpan.FromSeconds(5));
        builder.WebHost.UseSockets(sockets => sockets.UnsafePreferInlineScheduling = preview.Tcp.InlineScheduling);
        builder.WebHost.ConfigureKestrel(kestrel =>
        {
            kestrel.AddServerHeader = false;
            IPAddress address = HeraldOptionsValidator.TryParseHost(preview.Tcp.Host, out IPAddress parsed) ? parsed : IPAddress.None; // validated above
            for (int port = preview.Tcp.PortRangeStart; port <= preview.Tcp.PortRangeEnd; port++)
            {
                kestrel.Listen(address, port, listen =>
                {
                    listen.Protocols = HttpProtocols.None;
                    listen.UseConnectionHandler<TcpConnectionHandler>();
                });
            }
        });

        WebApplication app = builder.Build();
        app.Lifetime.ApplicationStarted.Register(() =>
        {
            HeraldOptions o = app.Services.GetRequiredService<IOptions<HeraldOptions>>().Value;
            app.Services.GetRequiredService<BrokerCore>().Log.TcpListening(o.ServerName, o.Tcp.Host, o.Tcp.PortRangeStart, o.Tcp.PortRangeEnd);
        });
        return app;
    }
}
