using Herald.Broker.Hosting;
using Herald.Broker.Monitoring;
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
