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
        string server = parse.GetValue(options.Server) ?? Environment("HERALD_URL") ?? context.Server ?? DefaultServer;
        string monitor = parse.GetValue(options.Monitor) ?? Environment("HERALD_MONITOR_URL") ?? context.Monitor ?? DefaultMonitor;
        string? token = parse.GetValue(options.Token) ?? Environment("HERALD_TOKEN") ?? ContextCredential(context.Token, context.Server ?? DefaultServer, server, contextName, "token", "--token", warnings);
        string? monitorToken = parse.GetValue(options.MonitorToken) ?? Environment("HERALD_MONITOR_TOKEN") ?? ContextCredential(context.MonitorToken, context.Monitor ?? DefaultMonitor, monitor, contextName, "monitoring token", "--monitor-token", warnings);
        WarnIfPlaintext(token, server, warnings);
        WarnIfPlaintext(monitorToken, monitor, warnings);
        return new ConnectionSettings(server, token, parse.GetValue(options.TlsCa) ?? Environment("HERALD_TLS_CA") ?? context.TlsCa, monitor, monitorToken, contextName);
    }

    /// <summary>
    /// A context's credential goes only to the server that context names: a <c>--server</c> or <c>HERALD_URL</c> (or
    /// monitoring address) from elsewhere gets none of it, so a URL pasted from a chat or set by a script cannot
    /// collect the token. Said on stderr, with the flag that sends a token on purpose.
    /// </summary>
    private static string? ContextCredential(string? credential, string contextServer, string server, string? contextName, string what, string flag, TextWriter warnings)
    {
        if (credential is null || SameServer(contextServer, server))
        {
            return credential;
        }

        warnings.WriteLine($"herald: not sending context '{contextName}''s {what} to {server}: it is for {contextServer} (pass {flag} to send one)");
        return null;
    }

    private static bool SameServer(string a, string b) => string.Equals(a.TrimEnd('/'), b.TrimEnd('/'), StringComparison.OrdinalIgnoreCase);

    /// <summary>A credential about to cross a network in clear text (tcp://, ws://, http:// to a host that is not loopback): said on stderr.</summary>
    private static void WarnIfPlaintext(string? credential, string server, TextWriter warnings)
    {
        int separator = server.IndexOf("://", StringComparison.Ordinal);
        if (credential is null || separator < 0)
        {
            return;
        }

        string scheme = server[..separator];
        string rest = server[(separator + 3)..];
        string host = rest.StartsWith('[') && rest.IndexOf(']', StringComparison.Ordinal) is var close and > 0
            ? rest[1..close]
            : rest.IndexOfAny([':', '/', '?']) is var end and >= 0 ? rest[..end] : rest;
        bool plaintext = scheme.Equals("tcp", StringComparison.OrdinalIgnoreCase) || scheme.Equals("ws", StringComparison.OrdinalIgnoreCase) || scheme.Equals("http", StringComparison.OrdinalIgnoreCase);
        bool loopback = host.Equals("localhost", StringComparison.OrdinalIgnoreCase) || (System.Net.IPAddress.TryParse(host, out System.Net.IPAddress? address) && System.Net.IPAddress.IsLoopback(address));
        if (plaintext && !loopback)
        {
            warnings.WriteLine($"herald: warning: sending a token to {host} without TLS ({scheme}://): anyone on the path can read it");
        }
    }

    private static string? Environment(string name) => System.Environment.GetEnvironmentVariable(name) is { Length: > 0 } value ? value : null;
}
