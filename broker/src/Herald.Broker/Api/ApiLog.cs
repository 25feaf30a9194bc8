using Microsoft.Extensions.Logging;

namespace Herald.Broker.Api;

/// <summary>
/// The server API's log lines (event ids 8xxx), source-generated. A key is named, never shown. Every admin action
/// (one that acts on clients or identities) is logged once, when it is done, with the key's name; publications and
/// reads are not logged (they are counted).
/// </summary>
internal static partial class ApiLog
{
    [LoggerMessage(8001, LogLevel.Information, "Server API listening on {Host}:{Port} for {Keys} keys ({Names}).")]
    public static partial void Listening(this ILogger logger, string host, int port, int keys, string names);

    [LoggerMessage(8002, LogLevel.Information, "Server API: key '{Key}' did {Action} {Target}.")]
    public static partial void AdminAction(this ILogger logger, string key, string action, string target);
}
