using Herald.Broker.Api;
using Herald.Broker.Monitoring;
using Herald.Broker.Policy;
using Herald.Broker.Transports;
using Herald.Broker.Transports.LongPoll;
using Herald.Broker.Transports.Sse;
using Herald.Broker.Transports.WebSockets;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Options;

namespace Herald.Broker.Hosting;

/// <summary>Builds the broker's host: configuration, services and Kestrel listeners. Used by Program and by tests.</summary>
public static class HeraldHost
{
    /// <summary>
    /// Builds the broker, one room at a time (<see cref="HostServices"/>, <see cref="HostListeners"/>, the rooms' own
    /// <c>MapX</c>). <paramref name="configure"/> runs after configuration is bound; <paramref name="overrides"/> runs
    /// after every service is registered, so a host embedding the broker (the test suites) can replace one (as
    /// <c>ConfigureTestServices</c> does).
    /// </summary>
    public static WebApplication Build(string[] args, Action<HeraldOptions>? configure = null, Action<IServiceCollection>? overrides = null)
    {
        WebApplicationBuilder builder = WebApplication.CreateSlimBuilder(new WebApplicationOptions
        {
            Args = args,
            ContentRootPath = AppContext.BaseDirectory,
        });

        IServiceCollection services = builder.Services;
        services.AddHeraldOptions(builder.Configuration, configure);
        services.AddTelemetry();
        services.AddTopicRouter();
        services.AddCompression();
        services.AddSecurity();
        services.AddCluster();
        services.AddHistory();
        services.AddPresence();
        services.AddSessions();
        services.AddLongPoll();
        var listeners = new Listeners();
        services.AddPolicy(listeners);

        HeraldOptions preview = Preview(builder.Configuration, configure, out IReadOnlyList<UnknownKey> unknownKeys);
        builder.AddHeraldOperations(preview); // logs, metrics, traces, health, monitoring
        builder.AddListeners(preview, listeners);
        services.AddClientCors(preview.Policy.AllowedDomains);
        if (preview.Api.Enabled)
        {
            services.AddIdempotency(preview.Api);
            services.AddServerApi(preview.Api);
        }

        overrides?.Invoke(services);
        WebApplication app = builder.Build();
        app.UseServerApi(preview.Api); // the API listener's own access check and per-key rate limit, first
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
        app.MapServerApi(preview.Api);
        app.LogWhenStarted(listeners, unknownKeys);
        return app;
    }

    /// <summary>
    /// The options bound and validated before anything is built, since Kestrel needs the port range while it is being
    /// built: a bad configuration fails before anything listens, with every problem listed. Keys the binder would ignore
    /// (typos) are found here too: a warning at start, or with StrictConfiguration a failure.
    /// </summary>
    private static HeraldOptions Preview(ConfigurationManager configuration, Action<HeraldOptions>? configure, out IReadOnlyList<UnknownKey> unknownKeys)
    {
        var preview = new HeraldOptions();
        IConfigurationSection section = configuration.GetSection(HeraldOptions.Section);
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
        unknownKeys = ConfigurationKeys.Unknown<HeraldOptions>(section);
        HeraldOptionsValidator.ThrowIfInvalid(preview, unknownKeys);
        return preview;
    }
}
