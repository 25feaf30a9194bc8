using System.CommandLine;
using System.Globalization;
using System.Net;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http.Connections;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Herald.LoadTest.Peers.SignalR;

/// <summary>
/// <c>signalr-server --host H --port P</c>: the hidden subcommand the SignalR target starts as its server
/// (the same tool, in a child process): Kestrel on <c>H:P</c>, <see cref="PubSubHub"/> at <see cref="Path"/>
/// with the MessagePack hub protocol (JSON stays available), WebSockets and long polling. Everything else
/// is ASP.NET Core's default, except the two settings below that the load needs.
/// </summary>
internal static class SignalRServer
{
    public const string Subcommand = "signalr-server";

    public const string Path = "/pubsub";

    /// <summary>
    /// SignalR's MaximumReceiveMessageSize (default 32 KB) raised so a publication of
    /// <see cref="Targets.SignalRTarget.MaxPayloadBytes"/> plus its topic and framing is accepted.
    /// </summary>
    public const int MaximumReceiveMessageSize = 2 * 1024 * 1024;

    private static readonly Option<int> Port = OptionKinds.Integer("port", 5080, 1, 65535, "the port Kestrel listens on");

    /// <summary>The hidden command (<c>--help</c> still lists its options); <c>--host</c> is the target's option.</summary>
    public static Command CreateCommand()
    {
        var command = new Command(Subcommand, "the SignalR target's server: the hub this tool hosts in a child process") { Hidden = true };
        command.Add(Targets.TargetCommandOptions.Host);
        command.Add(Port);
        command.SetAction(RunAsync);
        return command;
    }

    /// <exception cref="UsageException"><c>--host</c> is not an IP address.</exception>
    public static async Task<int> RunAsync(ParseResult parsed, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(parsed);
        string host = parsed.GetRequiredValue(Targets.TargetCommandOptions.Host);
        int port = parsed.GetValue(Port);
        if (!IPAddress.TryParse(host, out IPAddress? address))
        {
            throw new UsageException($"--host must be an IP address, got '{host}'.");
        }

        WebApplicationBuilder builder = WebApplication.CreateSlimBuilder(new WebApplicationOptions { Args = [] });
        // Warnings and errors only: nothing is logged per connection or per message.
        builder.Logging.ClearProviders();
        builder.Logging.AddSimpleConsole(o => o.SingleLine = true);
        builder.Logging.SetMinimumLevel(LogLevel.Warning);
        builder.WebHost.ConfigureKestrel(kestrel => kestrel.Listen(address, port));
        builder.Services
            .AddSignalR(hub => hub.MaximumReceiveMessageSize = MaximumReceiveMessageSize)
            .AddMessagePackProtocol();

        await using WebApplication app = builder.Build();
        app.UseWebSockets();
        app.MapHub<PubSubHub>(Path, http => http.Transports = HttpTransportType.WebSockets | HttpTransportType.LongPolling);
        await app.StartAsync(cancellationToken);
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"signalr-server listening on http://{host}:{port}{Path}"));
        try
        {
            await app.WaitForShutdownAsync(cancellationToken);
        }
        catch (OperationCanceledException)
        {
            // Ctrl+C in the tool's own handler: stop as on SIGTERM
        }

        await app.StopAsync(CancellationToken.None);
        return ExitCodes.Ok;
    }
}
