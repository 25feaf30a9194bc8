using System.CommandLine;
using System.Globalization;
using Herald.Client;

namespace Herald.Cli.Commands;

/// <summary>
/// The server API's actions on clients (an admin key): <c>herald api disconnect --client ID | --identity NAME</c>,
/// <c>revoke IDENTITY --until 2026-12-01T00:00:00Z|1h</c>, <c>unrevoke IDENTITY</c>, <c>revocations</c>,
/// <c>subscribe CLIENT PATTERN</c>, <c>unsubscribe CLIENT PATTERN</c>. Each prints its answer as one JSON line.
/// </summary>
internal static class ApiClientCommands
{
    public static void Add(Command command, Option<string?> api, Option<string?> key)
    {
        var reason = new Option<string?>("--reason") { Description = "What the client is told (at most 512 characters)", HelpName = "text" };

        var client = new Option<string?>("--client") { Description = "One client, by its client id (presence, /connz)", HelpName = "id" };
        var identity = new Option<string?>("--identity") { Description = "Every client of this identity, on every node", HelpName = "name" };
        var disconnect = new Command("disconnect", "End one client, or every client of an identity, telling each the reason") { client, identity, reason };
        disconnect.SetAction((parse, ct) => ApiCommand.RunAsync(parse, api, key, async server =>
        {
            (string? one, string? every) = (parse.GetValue(client), parse.GetValue(identity));
            if ((one is null) == (every is null))
            {
                throw new CliException(ExitCodes.Usage, "name --client or --identity (one of them)");
            }

            HeraldApiReach reach = one is not null
                ? await server.DisconnectClientAsync(one, parse.GetValue(reason), ct)
                : await server.DisconnectIdentityAsync(every!, parse.GetValue(reason), ct);
            Print(reach);
        }, ct));
        command.Subcommands.Add(disconnect);

        var revokedIdentity = new Argument<string>("identity") { Description = "A token's name, or a JWT's sub" };
        var until = new Option<string>("--until") { Description = "A time (RFC 3339) or a duration from now (90s, 15m, 1h)", Required = true, HelpName = "when" };
        var revoke = new Command("revoke", "Refuse an identity until a time on every node, and end what it holds now") { revokedIdentity, until, reason };
        revoke.SetAction((parse, ct) => ApiCommand.RunAsync(parse, api, key, async server =>
            Print(await server.RevokeAsync(parse.GetRequiredValue(revokedIdentity), When(parse.GetRequiredValue(until)), parse.GetValue(reason), ct)), ct));
        command.Subcommands.Add(revoke);

        var liftedIdentity = new Argument<string>("identity") { Description = "The identity to let in again" };
        var unrevoke = new Command("unrevoke", "Lift an identity's revocation on every node") { liftedIdentity };
        unrevoke.SetAction((parse, ct) => ApiCommand.RunAsync(parse, api, key, async server =>
            ApiCommand.Print(new { lifted = await server.UnrevokeAsync(parse.GetRequiredValue(liftedIdentity), ct) }), ct));
        command.Subcommands.Add(unrevoke);

        var revocations = new Command("revocations", "The revocations in force, earliest end first");
        revocations.SetAction((parse, ct) => ApiCommand.RunAsync(parse, api, key, async server =>
        {
            foreach (HeraldApiRevocation revocation in await server.RevocationsAsync(ct))
            {
                ApiCommand.Print(new { revocation.Identity, revocation.Until, revocation.Reason });
            }
        }, ct));
        command.Subcommands.Add(revocations);

        var subscribedClient = new Argument<string>("client") { Description = "The client id (a client that asked for server subscriptions: TCP, WebSocket, a long-poll session or SSE stream)" };
        var pattern = new Argument<string>("pattern") { Description = "The pattern" };
        var noEcho = new Option<bool>("--no-echo") { Description = "Not delivered what this client publishes" };
        var force = new Option<bool>("--force") { Description = "Even where the client's own subscribe permissions refuse the pattern" };
        var join = new Option<bool>("--join") { Description = "The client is present on the topic (one topic; its identity allowed to join)" };
        var presenceEvents = new Option<bool>("--presence") { Description = "The topic's join and leave events come to the subscription" };
        var subscribe = new Command("subscribe", "Subscribe a connected client to a pattern; prints its sid") { subscribedClient, pattern, noEcho, force, join, presenceEvents };
        subscribe.SetAction((parse, ct) => ApiCommand.RunAsync(parse, api, key, async server =>
            ApiCommand.Print(new { sid = await server.SubscribeClientAsync(parse.GetRequiredValue(subscribedClient), parse.GetRequiredValue(pattern), parse.GetValue(noEcho), parse.GetValue(force), parse.GetValue(join), parse.GetValue(presenceEvents), ct) }), ct));
        command.Subcommands.Add(subscribe);

        var unsubscribe = new Command("unsubscribe", "End a client's subscriptions to exactly a pattern, telling it the reason") { subscribedClient, pattern, reason };
        unsubscribe.SetAction((parse, ct) => ApiCommand.RunAsync(parse, api, key, async server =>
            ApiCommand.Print(new { sid = await server.UnsubscribeClientAsync(parse.GetRequiredValue(subscribedClient), parse.GetRequiredValue(pattern), parse.GetValue(reason), ct) }), ct));
        command.Subcommands.Add(unsubscribe);
    }

    private static void Print(HeraldApiReach reach) => ApiCommand.Print(new { reach.Clients, reach.Nodes, reach.NodesAsked });

    /// <summary>An RFC 3339 time, or a duration from now (<see cref="Durations"/>).</summary>
    private static DateTimeOffset When(string text) =>
        Durations.TryParse(text, out TimeSpan after) ? DateTimeOffset.UtcNow + after
        : DateTimeOffset.TryParse(text, CultureInfo.InvariantCulture, DateTimeStyles.AssumeUniversal, out DateTimeOffset at) ? at
        : throw new CliException(ExitCodes.Usage, $"--until '{text}' is neither a time (2026-12-01T00:00:00Z) nor a duration (90s, 15m, 1h)");
}
