using Herald.Broker.Hosting;
using Herald.Broker.Monitoring;
using Herald.Broker.Transports;
using Microsoft.Extensions.Options;

if (args.Length > 0 && args[0] == HealthProbe.Argument)
{
    return await HealthProbe.RunAsync(args).ConfigureAwait(false); // the container HEALTHCHECK: no host, one GET
}

try
{
    var app = HeraldHost.Build(args);
    await app.RunAsync().ConfigureAwait(false); // disposes the host when it stops
    return 0;
}
catch (OptionsValidationException e)
{
    await Console.Error.WriteLineAsync("Herald cannot start, its configuration is not valid:").ConfigureAwait(false);
    foreach (string failure in e.Failures)
    {
        await Console.Error.WriteLineAsync("  - " + failure).ConfigureAwait(false);
    }

    return 2;
}
catch (ListenerUnavailableException e)
{
    // One line, no stack: the port, the setting that asked for it and why (the host's own log of it is filtered out).
    await Console.Error.WriteLineAsync("Herald cannot start: " + e.Message).ConfigureAwait(false);
    return 2;
}
