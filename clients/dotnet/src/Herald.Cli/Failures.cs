using System.Net.Http;
using System.Net.Sockets;
using System.Security.Authentication;
using Herald.Client;
using Herald.Protocol;

namespace Herald.Cli;

/// <summary>
/// Turns what a command threw into one line on stderr and an exit code (<see cref="ExitCodes"/>). Expected
/// failures (the broker unreachable or refusing, no reply, a bad file) print their message; only a bug prints
/// its type, and its stack only with <c>HERALD_DEBUG=1</c>.
/// </summary>
internal static class Failures
{
    public static int Report(Exception exception, TextWriter error)
    {
        (int code, string message) = Classify(exception);
        error.WriteLine($"herald: {message}");
        if (code == ExitCodes.Failure && exception is not (CliException or HeraldException) && Environment.GetEnvironmentVariable("HERALD_DEBUG") == "1")
        {
            error.WriteLine(exception);
        }

        return code;
    }

    private static (int Code, string Message) Classify(Exception exception) => exception switch
    {
        CliException e => (e.ExitCode, e.Message),
        HeraldApiException { Status: 401 or 403 } e => (ExitCodes.Refused, e.Status == 401 ? "the server API refused the key (set --key or HERALD_API_KEY)" : $"refused: {e.Message}"),
        HeraldApiException { Status: 400 or 413 } e => (ExitCodes.Usage, $"{e.Code}: {e.Message}"),
        HeraldApiException e => (ExitCodes.Failure, $"{e.Code}: {e.Message}"),
        HeraldNoRespondersException e => (ExitCodes.NoReply, $"no responders: nobody subscribes to '{e.Topic}'"),
        HeraldTimeoutException e => (ExitCodes.NoReply, $"no reply on '{e.Topic}' within {Durations.Format(e.Timeout)}"),
        HeraldConnectionException e => (ExitCodes.CannotConnect, $"cannot connect: {e.Message}"),
        HeraldException { ErrorCode: ErrorCode.AuthenticationFailed } => (ExitCodes.Refused, "authentication failed: the broker refused the token (set --token, HERALD_TOKEN or the context's token)"),
        HeraldException { ErrorCode: ErrorCode.PermissionDenied } e => (ExitCodes.Refused, $"permission denied: {e.Message}"),
        HeraldException { ErrorCode: ErrorCode.TooManyConnections } e => (ExitCodes.Refused, $"refused: {e.Message}"),
        HeraldException { ErrorCode: ErrorCode.InvalidTopic or ErrorCode.ReservedTopic or ErrorCode.TopicTooLong } e => (ExitCodes.Usage, e.Message),
        HeraldException { ErrorCode: ErrorCode.MalformedFrame, IsFatal: true } e when e.Message.Contains("max_presence_info", StringComparison.Ordinal) => (ExitCodes.Usage, $"--info is longer than the broker takes: {e.Message}"),
        HeraldException e => (ExitCodes.Failure, $"{e.ErrorCode}: {e.Message}"),
        HttpRequestException { InnerException: SocketException or AuthenticationException or IOException } e => (ExitCodes.CannotConnect, $"cannot connect: {e.Message}"),
        HttpRequestException e when e.StatusCode is null => (ExitCodes.CannotConnect, $"cannot connect: {e.Message}"),
        TaskCanceledException or TimeoutException => (ExitCodes.CannotConnect, "cannot connect: no answer in time"),
        ArgumentException e => (ExitCodes.Usage, e.Message),
        NotSupportedException e => (ExitCodes.Usage, e.Message),
        _ => (ExitCodes.Failure, $"unexpected {exception.GetType().Name}: {exception.Message} (HERALD_DEBUG=1 prints where)"),
    };
}
