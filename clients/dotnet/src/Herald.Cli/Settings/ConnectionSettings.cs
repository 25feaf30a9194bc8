using System.CommandLine;

namespace Herald.Cli.Settings;

/// <summary>
/// Where and how to connect, each value taken from the first that has it: a flag, then the environment
/// (<c>HERALD_URL</c>, <c>HERALD_TOKEN</c>, <c>HERALD_TLS_CA</c>, <c>HERALD_MONITOR_URL</c>,
/// <c>HERALD_MONITOR_TOKEN</c>), then the context (<c>--context</c>, else <c>HERALD_CONTEXT</c>, else the selected
/// one), then the defaults: the broker's own (TCP 4502 and the monitoring listener on 127.0.0.1:8222).
/// </summary>
internal sealed record ConnectionSettings(string Server, string? Token, string? TlsCa, string Monitor, string? MonitorToken, string? ContextName)
{
    public const string DefaultServer = "tcp://localhost:4502";

    public const string DefaultMonitor = "http://127.0.0.1:8222";

    public static ConnectionSettings Resolve(ParseResult parse, GlobalOptions options, ContextStore store, TextWriter warnings)
    {
        string? contextName = parse.GetValue(options.Context) ?? Environment("HERALD_CONTEXT") ?? store.Selected;
        HeraldContext context = contextName is null ? new HeraldContext() : store.Load(contextName, warnings);
        return new ConnectionSettings(
            parse.GetValue(options.Server) ?? Environment("HERALD_URL") ?? context.Server ?? DefaultServer,
            parse.GetValue(options.Token) ?? Environment("HERALD_TOKEN") ?? context.Token,
            parse.GetValue(options.TlsCa) ?? Environment("HERALD_TLS_CA") ?? context.TlsCa,
            parse.GetValue(options.Monitor) ?? Environment("HERALD_MONITOR_URL") ?? context.Monitor ?? DefaultMonitor,
            parse.GetValue(options.MonitorToken) ?? Environment("HERALD_MONITOR_TOKEN") ?? context.MonitorToken,
            contextName);
    }

    private static string? Environment(string name) => System.Environment.GetEnvironmentVariable(name) is { Length: > 0 } value ? value : null;
}
