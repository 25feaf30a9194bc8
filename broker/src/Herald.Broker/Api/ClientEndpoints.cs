using Herald.Broker.Engines;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Transports;
using Herald.Protocol;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Api;

/// <summary>
/// The backend's actions on clients (scope <c>admin</c>): disconnect a client by id or every client of an identity, revoke an
/// identity until a time (and lift it, list what is in force), subscribe and unsubscribe a connected client. Each enters
/// through <see cref="IClientControl"/> (<see cref="BrokerCore.ClientControl"/>), which reaches the node holding the client
/// (every node, in a cluster), and is logged once, when done, with the key's name (never the key). A client is named by
/// its client id (spec §15.1: <c>/connz</c>, presence, a long-poll session's create answer).
/// </summary>
internal static class ClientEndpoints
{
    /// <summary>The longest identity, client id or pattern a request may name (longer: 400).</summary>
    private const int MaxNameLength = 1024;

    public static void Map(RouteGroupBuilder api)
    {
        api.MapPost("/clients/disconnect", Disconnect).RequireScope(ApiScope.Admin);
        api.MapPost("/clients/subscribe", Subscribe).RequireScope(ApiScope.Admin);
        api.MapPost("/clients/unsubscribe", Unsubscribe).RequireScope(ApiScope.Admin);
        api.MapPost("/revocations", Revoke).RequireScope(ApiScope.Admin);
        api.MapGet("/revocations", Revocations).RequireScope(ApiScope.Admin);
        api.MapDelete("/revocations/{identity}", Unrevoke).RequireScope(ApiScope.Admin);
    }

    private static Task Disconnect(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        DisconnectRequest request = await ReadAsync(context, ApiJsonContext.Default.DisconnectRequest, "{\"client\": ...} or {\"identity\": ...}").ConfigureAwait(false);
        if ((request.Client is null) == (request.Identity is null))
        {
            throw HttpProblem.Malformed("Name either 'client' (one client, by its client id) or 'identity' (every client of it), not both.");
        }

        var action = new ClientAction(ClientActionKind.Disconnect) { Client = Name(request.Client, "client"), Identity = Name(request.Identity, "identity"), Reason = Reason(request.Reason) };
        ClientActionOutcome outcome = await RunAsync(context, action, request.Client is not null ? $"client {request.Client}" : $"identity '{request.Identity}'").ConfigureAwait(false);
        if (request.Client is not null && outcome.Clients == 0)
        {
            throw new HttpProblem(StatusCodes.Status404NotFound, "ClientNotFound", $"No node holds client '{request.Client}' (it may have left).");
        }

        await Answer(context, outcome).ConfigureAwait(false);
    });

    private static Task Revoke(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        RevokeRequest request = await ReadAsync(context, ApiJsonContext.Default.RevokeRequest, "{\"identity\": ..., \"until\": \"2026-12-01T00:00:00Z\"}").ConfigureAwait(false);
        string identity = Name(request.Identity, "identity") ?? throw HttpProblem.Malformed("'identity' is required: the token's name, or the JWT's sub.");
        DateTimeOffset now = context.RequestServices.GetRequiredService<BrokerCore>().Revocations.Now;
        if (request.Until is not { } until || until <= now)
        {
            throw HttpProblem.Malformed($"'until' must be a time after now ({now:yyyy-MM-ddTHH:mm:ssZ}), in RFC 3339 (\"2026-12-01T00:00:00Z\").");
        }

        var action = new ClientAction(ClientActionKind.Revoke) { Identity = identity, Until = until, Reason = Reason(request.Reason) };
        ClientActionOutcome outcome = await RunAsync(context, action, $"identity '{identity}' until {until:yyyy-MM-ddTHH:mm:ssZ}").ConfigureAwait(false);
        await Answer(context, outcome).ConfigureAwait(false);
    });

    private static Task Unrevoke(HttpContext context, string identity) => HttpExchange.Handle(context, async () =>
    {
        string name = Name(identity, "identity")!;
        bool held = context.RequestServices.GetRequiredService<BrokerCore>().Revocations.Find(name) is not null;
        await RunAsync(context, new ClientAction(ClientActionKind.Unrevoke) { Identity = name }, $"identity '{name}'").ConfigureAwait(false);
        context.Response.StatusCode = held ? StatusCodes.Status204NoContent : StatusCodes.Status404NotFound;
    });

    private static IResult Revocations(HttpContext context)
    {
        Revocations table = context.RequestServices.GetRequiredService<BrokerCore>().Revocations;
        IReadOnlyList<Revocation> inForce = table.InForce();
        return Results.Json(new RevocationsPage(table.Max, [.. inForce.Select(r => new RevocationInfo(r.Identity, r.Until, r.Reason))]), ApiJsonContext.Default.RevocationsPage);
    }

    private static Task Subscribe(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        ClientSubscriptionRequest request = await ReadAsync(context, ApiJsonContext.Default.ClientSubscriptionRequest, "{\"client\": ..., \"pattern\": ...}").ConfigureAwait(false);
        string client = Name(request.Client, "client") ?? throw HttpProblem.Malformed("'client' is required: the client id to subscribe.");
        string pattern = Name(request.Pattern, "pattern") ?? throw HttpProblem.Malformed("'pattern' is required.");
        var action = new ClientAction(ClientActionKind.Subscribe)
        {
            Client = client,
            Pattern = pattern,
            Options = (uint)((request.NoEcho == true ? SubscribeOptions.NoEcho : 0) | (request.Join == true ? SubscribeOptions.Join : 0) | (request.Presence == true ? SubscribeOptions.PresenceEvents : 0)),
            Force = request.Force == true,
        };
        ClientActionOutcome outcome = Found(await RunAsync(context, action, $"client {client} to '{pattern}'{(action.Force ? " (forced)" : "")}").ConfigureAwait(false), client);
        await Results.Json(new ClientSubscriptionResult(outcome.Sid), ApiJsonContext.Default.ClientSubscriptionResult).ExecuteAsync(context).ConfigureAwait(false);
    });

    private static Task Unsubscribe(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        ClientSubscriptionRequest request = await ReadAsync(context, ApiJsonContext.Default.ClientSubscriptionRequest, "{\"client\": ..., \"pattern\": ...}").ConfigureAwait(false);
        string client = Name(request.Client, "client") ?? throw HttpProblem.Malformed("'client' is required: the client id to unsubscribe.");
        string pattern = Name(request.Pattern, "pattern") ?? throw HttpProblem.Malformed("'pattern' is required: every subscription of the client with exactly this pattern ends.");
        var action = new ClientAction(ClientActionKind.Unsubscribe) { Client = client, Pattern = pattern, Reason = Reason(request.Reason) };
        ClientActionOutcome outcome = Found(await RunAsync(context, action, $"client {client} from '{pattern}'").ConfigureAwait(false), client);
        await Results.Json(new ClientSubscriptionResult(outcome.Sid), ApiJsonContext.Default.ClientSubscriptionResult).ExecuteAsync(context).ConfigureAwait(false);
    });

    /// <summary>Runs <paramref name="action"/> where it must be, logs it once with the key's name; a cluster that cannot be reached is 503.</summary>
    private static async Task<ClientActionOutcome> RunAsync(HttpContext context, ClientAction action, string target)
    {
        ClientActionOutcome outcome;
        try
        {
            outcome = await context.RequestServices.GetRequiredService<BrokerCore>().ClientControl.RunAsync(action, context.RequestAborted).ConfigureAwait(false);
        }
        catch (ClusterUnavailableException e)
        {
            throw HttpProblem.Unavailable("ClusterUnavailable", $"The cluster could not be reached: {e.Message}", 1);
        }

        if (outcome.Code == "TooManyRevocations")
        {
            throw new HttpProblem(StatusCodes.Status409Conflict, outcome.Code, outcome.Message!);
        }

        context.RequestServices.GetRequiredService<ILoggerFactory>().CreateLogger(typeof(ClientEndpoints)).AdminAction(ApiEndpoints.CallerOf(context).Name, action.Kind.ToString().ToLowerInvariant(), target);
        return outcome;
    }

    /// <summary>A subscribe's or unsubscribe's outcome for one client: 404 when no node holds it, the client's refusal as its problem.</summary>
    private static ClientActionOutcome Found(ClientActionOutcome outcome, string client)
    {
        if (outcome.Code is { } code)
        {
            int status = code switch
            {
                nameof(ErrorCode.PermissionDenied) => StatusCodes.Status403Forbidden,
                nameof(ErrorCode.UnknownSubscription) => StatusCodes.Status404NotFound,
                nameof(ErrorCode.InvalidTopic) or nameof(ErrorCode.TopicTooLong) => StatusCodes.Status400BadRequest,
                nameof(ErrorCode.PresenceUnavailable) => StatusCodes.Status503ServiceUnavailable,
                _ => StatusCodes.Status409Conflict, // NotSupported, TooManySubscriptions, TooManyTopics, PresenceFull: the client's state
            };
            throw new HttpProblem(status, code, outcome.Message ?? code);
        }

        return outcome.Clients > 0 ? outcome : throw new HttpProblem(StatusCodes.Status404NotFound, "ClientNotFound", $"No node holds client '{client}' (it may have left).");
    }

    private static Task Answer(HttpContext context, ClientActionOutcome outcome) =>
        Results.Json(new ClientActionResult(outcome.Clients, outcome.Nodes, outcome.NodesAsked), ApiJsonContext.Default.ClientActionResult).ExecuteAsync(context);

    private static async Task<T> ReadAsync<T>(HttpContext context, System.Text.Json.Serialization.Metadata.JsonTypeInfo<T> type, string shape)
        where T : class =>
        await HttpExchange.ReadJsonAsync(context, context.RequestServices.GetRequiredService<ApiOptions>().MaxBodyBytes, type).ConfigureAwait(false)
            ?? throw HttpProblem.Malformed($"The body must be a JSON object: {shape}.");

    private static string? Name(string? value, string field) => value switch
    {
        null => null,
        { Length: 0 } => throw HttpProblem.Malformed($"'{field}' is empty."),
        { Length: > MaxNameLength } => throw HttpProblem.Malformed($"'{field}' is longer than {MaxNameLength} characters."),
        _ => value,
    };

    private static string Reason(string? reason) => reason is { Length: > ClientAction.MaxReasonLength }
        ? throw HttpProblem.Malformed($"'reason' is longer than {ClientAction.MaxReasonLength} characters: the client is told it, keep it short.")
        : reason ?? "";
}
