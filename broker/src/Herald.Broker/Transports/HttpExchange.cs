using System.Buffers;
using System.Globalization;
using System.IO.Pipelines;
using System.Net;
using System.Text.Json;
using System.Text.Json.Serialization.Metadata;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Protocol;
using Microsoft.AspNetCore.Cors.Infrastructure;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;

namespace Herald.Broker.Transports;

/// <summary>An HTTP request failed; written as an RFC 7807 problem with <see cref="Code"/> (longpoll §3).</summary>
internal sealed class HttpProblem(int status, string code, string message) : Exception(message)
{
    public int Status { get; } = status;

    public string Code { get; } = code;

    public TimeSpan? RetryAfter { get; init; }

    /// <summary>Why a session ended (410): the spec §8 code, as the fatal ERROR on TCP says it.</summary>
    public string? Reason { get; init; }

    public static HttpProblem Malformed(string message) => new(StatusCodes.Status400BadRequest, "MalformedRequest", message);

    public static HttpProblem Unavailable(string code, string message, int retryAfterSeconds) =>
        new(StatusCodes.Status503ServiceUnavailable, code, message) { RetryAfter = TimeSpan.FromSeconds(retryAfterSeconds) };
}

/// <summary>
/// What every HTTP transport does the same way around a session's operation: the bearer credential from the
/// headers, a bounded body, JSON requests, and the mapping of the session's answers onto HTTP statuses and
/// RFC 7807 problems (longpoll §3). No rule a client is held to lives here; those are the session's.
/// </summary>
internal static class HttpExchange
{
    /// <summary>
    /// The bearer credential's identity (longpoll §1.1), from the headers alone: nothing is read or held
    /// before it (a connect hook is asked here). A failure is counted, waits the configured delay, then is 401; a connect
    /// hook that did not decide is 503 <c>HookUnavailable</c>; a revoked identity is 403 <c>Revoked</c> at once.
    /// </summary>
    /// <param name="fallback">The credential from elsewhere (a query parameter, for clients that cannot set headers), used only without an Authorization header.</param>
    public static async Task<Identity> AuthenticateAsync(HttpContext context, BrokerCore broker, string transport, string? fallback = null)
    {
        string? header = context.Request.Headers.Authorization;
        string? credential = header is not null && header.StartsWith("Bearer ", StringComparison.OrdinalIgnoreCase) ? header["Bearer ".Length..].Trim()
            : string.IsNullOrEmpty(fallback) ? null : fallback;
        Security.Verdict verdict = await broker.Access.ConnectAsync(new Security.ConnectQuestion(credential, transport, RemoteOf(context), null, null)).ConfigureAwait(false);
        try
        {
            return ProtocolSession.IdentityOf(broker, verdict, RemoteOf(context), transport);
        }
        catch (ProtocolException e) when (e.Code == ErrorCode.HookUnavailable)
        {
            throw HttpProblem.Unavailable(nameof(ErrorCode.HookUnavailable), e.Message, 1); // the backend did not decide: told apart from 401, retried
        }
        catch (ProtocolException e) when (e.Code == ErrorCode.Revoked)
        {
            broker.Metrics.ProtocolError(ErrorCode.Revoked);
            throw new HttpProblem(StatusCodes.Status403Forbidden, nameof(ErrorCode.Revoked), e.Message); // a good credential: no delay, and said why
        }
        catch (ProtocolException e)
        {
            broker.Metrics.ProtocolError(ErrorCode.AuthenticationFailed);
            await Task.Delay(broker.Authenticator.FailureDelay, context.RequestAborted).ConfigureAwait(false);
            throw new HttpProblem(StatusCodes.Status401Unauthorized, nameof(ErrorCode.AuthenticationFailed), e.Message);
        }
    }

    /// <summary>Whether a browser page from <paramref name="origin"/> may use the client endpoints: the client endpoints' CORS rule (<c>Herald:Policy:AllowedDomains</c>).</summary>
    public static async Task<bool> IsOriginAllowedAsync(HttpContext context, string origin)
    {
        ICorsPolicyProvider provider = context.RequestServices.GetRequiredService<ICorsPolicyProvider>();
        CorsPolicy? policy = await provider.GetPolicyAsync(context, ClientCors.Policy).ConfigureAwait(false);
        return policy is not null && (policy.AllowAnyOrigin || policy.IsOriginAllowed(origin));
    }

    public static IPEndPoint? RemoteOf(HttpContext context) =>
        context.Connection.RemoteIpAddress is { } address ? new IPEndPoint(address, context.Connection.RemotePort) : null;

    /// <summary>Reads the whole body, refusing more than <paramref name="max"/> bytes with 413 (Kestrel is told the limit too).</summary>
    public static async Task<ReadOnlySequence<byte>> ReadBodyAsync(HttpContext context, int max)
    {
        if (context.Request.ContentLength > max)
        {
            throw TooLarge(max);
        }

        if (context.Features.Get<IHttpMaxRequestBodySizeFeature>() is { IsReadOnly: false } limit)
        {
            limit.MaxRequestBodySize = max;
        }

        PipeReader reader = context.Request.BodyReader;
        try
        {
            while (true)
            {
                ReadResult result = await reader.ReadAsync(context.RequestAborted).ConfigureAwait(false);
                if (result.Buffer.Length > max)
                {
                    throw TooLarge(max);
                }

                if (result.IsCompleted)
                {
                    byte[] body = result.Buffer.ToArray();
                    reader.AdvanceTo(result.Buffer.End);
                    return new ReadOnlySequence<byte>(body);
                }

                reader.AdvanceTo(result.Buffer.Start, result.Buffer.End); // keep it all, wait for more
            }
        }
        catch (BadHttpRequestException e) when (e.StatusCode == StatusCodes.Status413PayloadTooLarge)
        {
            throw TooLarge(max);
        }
    }

    /// <summary>The body as <typeparamref name="T"/> (source-generated JSON); an empty body is <c>null</c>.</summary>
    public static async Task<T?> ReadJsonAsync<T>(HttpContext context, int max, JsonTypeInfo<T> type)
        where T : class
    {
        ReadOnlySequence<byte> body = await ReadBodyAsync(context, max).ConfigureAwait(false);
        if (body.IsEmpty)
        {
            return null;
        }

        try
        {
            var reader = new Utf8JsonReader(body);
            return JsonSerializer.Deserialize(ref reader, type) ?? throw HttpProblem.Malformed("The body must be a JSON object.");
        }
        catch (JsonException e)
        {
            throw HttpProblem.Malformed(JsonFault(body, e, type));
        }
    }

    /// <summary>
    /// What was wrong with a JSON body, said in the client's terms: the field and the JSON type it takes
    /// (<c>'pattern' must be a string.</c>), or where the JSON breaks. The serializer's own text names .NET types
    /// (<c>System.Nullable`1[System.Int64]</c>) and is never sent.
    /// </summary>
    private static string JsonFault(ReadOnlySequence<byte> body, JsonException e, JsonTypeInfo type)
    {
        try
        {
            using JsonDocument parsed = JsonDocument.Parse(body);
        }
        catch (JsonException)
        {
            return $"The body is not valid JSON (line {(e.LineNumber ?? 0) + 1}, byte {(e.BytePositionInLine ?? 0) + 1}).";
        }

        // Well-formed, so a value has the wrong type: walk the path ($.since.offset) through the request's properties.
        string path = e.Path is { Length: > 1 } p && p.StartsWith("$.", StringComparison.Ordinal) ? p[2..] : "";
        if (path.Length == 0)
        {
            return "The body must be a JSON object.";
        }

        Type? expected = null;
        JsonTypeInfo? current = type;
        foreach (string name in path.Split('.'))
        {
            JsonPropertyInfo? property = current?.Properties.FirstOrDefault(candidate => candidate.Name == name);
            expected = property?.PropertyType;
            current = property is null ? null : type.Options.GetTypeInfo(property.PropertyType);
        }

        return expected is null ? $"'{path}' has the wrong type." : $"'{path}' must be {JsonKindOf(expected)}.";
    }

    /// <summary>The JSON type a request property takes, as a client reads it.</summary>
    private static string JsonKindOf(Type type) => (Nullable.GetUnderlyingType(type) ?? type) switch
    {
        var t when t == typeof(string) => "a string",
        var t when t == typeof(bool) => "a boolean (true or false)",
        var t when t == typeof(ulong) || t == typeof(uint) => "a non-negative integer",
        var t when t == typeof(long) || t == typeof(int) => "an integer",
        var t when t == typeof(double) => "a number",
        _ => "a JSON object",
    };

    /// <summary>Runs a handler and writes every refusal as an RFC 7807 problem with the spec's code (longpoll §3).</summary>
    public static async Task Handle(HttpContext context, Func<Task> handler)
    {
        try
        {
            await handler().ConfigureAwait(false);
        }
        catch (HttpProblem e)
        {
            await ProblemAsync(context, e.Status, e.Code, e.Message, e.RetryAfter, e.Reason).ConfigureAwait(false);
        }
        catch (ProtocolException e)
        {
            HttpProblem problem = ProblemOf(e);
            await ProblemAsync(context, problem.Status, problem.Code, problem.Message, retryAfter: null).ConfigureAwait(false);
        }
    }

    /// <summary>A session's fatal refusal as the HTTP problem it is answered with (longpoll §3).</summary>
    public static HttpProblem ProblemOf(ProtocolException e) =>
        new(StatusOf(e.Code), e.Code is ErrorCode.MalformedFrame or ErrorCode.FrameTooLarge or ErrorCode.UnknownFrameType or ErrorCode.UnexpectedFrame ? "MalformedRequest" : e.Code.ToString(), e.Message);

    /// <summary>A session's answer: none or a notice (RateLimited) is <paramref name="status"/>, with the notice; a refusal is thrown as its problem.</summary>
    public static (int Status, string? Notice) Outcome(Refusal refusal, int status)
    {
        if (refusal.Code == ErrorCode.RateLimited)
        {
            return (status, nameof(ErrorCode.RateLimited));
        }

        if (!refusal.IsNone)
        {
            throw new HttpProblem(StatusOf(refusal.Code), refusal.Code.ToString(), refusal.Message!);
        }

        return (status, null);
    }

    /// <summary>The HTTP status of a spec §8 code (longpoll §3).</summary>
    private static int StatusOf(ErrorCode code) => code switch
    {
        ErrorCode.PermissionDenied or ErrorCode.Revoked => StatusCodes.Status403Forbidden,
        ErrorCode.UnknownSubscription => StatusCodes.Status404NotFound,
        ErrorCode.TooManyTopics or ErrorCode.PresenceFull => StatusCodes.Status409Conflict,
        ErrorCode.AuthenticationFailed => StatusCodes.Status401Unauthorized,
        ErrorCode.SlowConsumer or ErrorCode.StaleConnection or ErrorCode.Disconnected => StatusCodes.Status410Gone,
        ErrorCode.ShuttingDown or ErrorCode.TooManyConnections or ErrorCode.PresenceUnavailable or ErrorCode.HookUnavailable => StatusCodes.Status503ServiceUnavailable,
        _ => StatusCodes.Status400BadRequest,
    };

    private static HttpProblem TooLarge(int max) => new(StatusCodes.Status413PayloadTooLarge, "BodyTooLarge", $"The request body is over the limit of {max} bytes.");

    private static async Task ProblemAsync(HttpContext context, int status, string code, string detail, TimeSpan? retryAfter, string? reason = null)
    {
        if (context.Response.HasStarted)
        {
            return;
        }

        context.Response.Clear();
        if (status == StatusCodes.Status401Unauthorized)
        {
            context.Response.Headers.WWWAuthenticate = "Bearer";
        }

        if (retryAfter is { } after)
        {
            context.Response.Headers.RetryAfter = ((int)Math.Ceiling(after.TotalSeconds)).ToString(CultureInfo.InvariantCulture);
        }

        var extensions = new Dictionary<string, object?> { ["code"] = code };
        if (reason is not null)
        {
            extensions["reason"] = reason;
        }

        await Results.Problem(detail, statusCode: status, title: code, extensions: extensions).ExecuteAsync(context).ConfigureAwait(false);
    }
}
