using System.CommandLine;

namespace Herald.Cli.Settings;

/// <summary>The connection options every command takes (recursive: before or after the command's name).</summary>
internal sealed class GlobalOptions
{
    public Option<string?> Server { get; } = new("--server", "-s")
    {
        Description = "Broker address: tcp://host:4502, tls://..., ws://host:8080/ws, http://host:8080 [env HERALD_URL]",
        HelpName = "url",
        Recursive = true,
    };

    public Option<string?> Token { get; } = new("--token")
    {
        Description = "Credential for a broker with authentication on: a static token or a JWT [env HERALD_TOKEN]",
        Recursive = true,
    };

    public Option<string?> Context { get; } = new("--context")
    {
        Description = "Use this context instead of the selected one [env HERALD_CONTEXT]",
        HelpName = "name",
        Recursive = true,
    };

    public Option<string?> TlsCa { get; } = new("--tls-ca")
    {
        Description = "PEM file of the CA (or self-signed certificate) to trust for tls://, wss://, https:// [env HERALD_TLS_CA]",
        HelpName = "file",
        Recursive = true,
    };

    public Option<string?> Monitor { get; } = new("--monitor")
    {
        Description = "Monitoring listener for 'herald server': http://host:8222 [env HERALD_MONITOR_URL]",
        HelpName = "url",
        Recursive = true,
    };

    public Option<string?> MonitorToken { get; } = new("--monitor-token")
    {
        Description = "Monitoring token (Herald:Monitoring:Token), sent as a bearer token [env HERALD_MONITOR_TOKEN]",
        Recursive = true,
    };

    public IEnumerable<Option> All => [Server, Token, Context, TlsCa, Monitor, MonitorToken];
}
