using System.CommandLine;
using System.Globalization;
using System.Security.Cryptography;
using System.Text;
using System.Text.Encodings.Web;
using System.Text.Json;
using Herald.Client;

namespace Herald.Cli.Commands;

/// <summary>
/// <c>herald api publish|broadcast|history|presence|topics|info|new-key</c> (and the admin actions of
/// <see cref="ApiClientCommands"/>: disconnect, revoke, unrevoke, revocations, subscribe, unsubscribe): the broker's server API (README "From your
/// backend") through <see cref="HeraldApiClient"/>, at <c>--api</c> (else <c>HERALD_API_URL</c>, else
/// http://127.0.0.1:8224) with the key from <c>--key</c> (else <c>HERALD_API_KEY</c>), which is sent and never
/// printed. Answers are printed as JSON lines; a refused key exits 4, a refused request 2 (400, 413) or 1.
/// <c>new-key</c> makes a key and prints it once with the configuration lines that hold its hash.
/// </summary>
internal static class ApiCommand
{
    public const string DefaultApi = "http://127.0.0.1:8224";

    private static readonly JsonSerializerOptions Indented = new() { WriteIndented = true, Encoder = JavaScriptEncoder.UnsafeRelaxedJsonEscaping };

    private static readonly JsonSerializerOptions Json = new() { Encoder = JavaScriptEncoder.UnsafeRelaxedJsonEscaping, PropertyNamingPolicy = JsonNamingPolicy.SnakeCaseLower };

    public static Command Create()
    {
        var api = new Option<string?>("--api") { Description = $"The server API's address (HERALD_API_URL; default {DefaultApi})", Recursive = true, HelpName = "url" };
        var key = new Option<string?>("--key") { Description = "The API key (HERALD_API_KEY); sent, never printed", Recursive = true, HelpName = "key" };
        var command = new Command("api", "Drive the broker through its server API with an API key (not a client token)") { api, key };

        var headers = new Option<string[]>("--header", "-H") { Description = "A header Key=Value (repeat for more)", HelpName = "k=v", AllowMultipleArgumentsPerToken = false };
        var idempotency = new Option<string?>("--idempotency-key") { Description = "Publish once per topic and key within the broker's window", HelpName = "key" };

        var topic = new Argument<string>("topic") { Description = "The topic" };
        var payload = new Argument<string>("payload") { Description = "The payload, as UTF-8 text" };
        var publish = new Command("publish", "Publish one message") { topic, payload, headers, idempotency };
        publish.SetAction((parse, ct) => RunAsync(parse, api, key, async client =>
        {
            bool duplicate = await client.PublishAsync(parse.GetRequiredValue(topic), Encoding.UTF8.GetBytes(parse.GetRequiredValue(payload)), Headers(parse.GetValue(headers)), parse.GetValue(idempotency), ct);
            Print(new { duplicate });
        }, ct));
        command.Subcommands.Add(publish);

        var topics = new Option<string[]>("--topic", "-t") { Description = "A topic (repeat for more)", Required = true, HelpName = "topic" };
        var broadcastPayload = new Argument<string>("payload") { Description = "The payload, as UTF-8 text" };
        var broadcast = new Command("broadcast", "Publish one message to many topics") { broadcastPayload, topics, headers, idempotency };
        broadcast.SetAction((parse, ct) => RunAsync(parse, api, key, async client =>
        {
            IReadOnlyList<HeraldApiResult> results = await client.BroadcastAsync(parse.GetRequiredValue(topics), Encoding.UTF8.GetBytes(parse.GetRequiredValue(broadcastPayload)), Headers(parse.GetValue(headers)), parse.GetValue(idempotency), ct);
            foreach (HeraldApiResult result in results)
            {
                Print(new { result.Status, result.Duplicate, result.Code, result.Detail });
            }

            return results.All(r => r.Succeeded) ? ExitCodes.Ok : ExitCodes.Failure;
        }, ct));
        command.Subcommands.Add(broadcast);

        var historyTopic = new Argument<string>("topic") { Description = "A topic that keeps a history" };
        var after = new Option<ulong>("--after") { Description = "Entries with an offset above this one", DefaultValueFactory = _ => 0, HelpName = "offset" };
        var limit = new Option<int>("--limit", "-n") { Description = "Most entries", DefaultValueFactory = _ => 100, HelpName = "n" };
        var history = new Command("history", "A topic's kept messages after a position") { historyTopic, after, limit };
        history.SetAction((parse, ct) => RunAsync(parse, api, key, async client =>
        {
            HeraldApiHistoryPage page = await client.HistoryAsync(parse.GetRequiredValue(historyTopic), parse.GetValue(after), parse.GetValue(limit), ct);
            foreach (HeraldApiHistoryEntry entry in page.Entries)
            {
                Print(new { entry.Offset, Data = Encoding.UTF8.GetString(entry.Payload), entry.Headers });
            }
        }, ct));
        command.Subcommands.Add(history);

        var presenceTopic = new Argument<string>("topic") { Description = "One topic" };
        var presence = new Command("presence", "A topic's occupancy and members") { presenceTopic };
        presence.SetAction((parse, ct) => RunAsync(parse, api, key, async client =>
        {
            HeraldApiPresencePage page = await client.PresenceAsync(parse.GetRequiredValue(presenceTopic), cancellationToken: ct);
            Print(new { page.Members, page.Identities, Entries = page.Entries.Select(m => new { m.Client, m.Identity, m.Info }), page.Next });
        }, ct));
        command.Subcommands.Add(presence);

        var prefix = new Option<string?>("--prefix") { Description = "Only patterns starting with this", HelpName = "prefix" };
        var topicsCommand = new Command("topics", "The patterns subscribed on the answering node, with their subscribers") { prefix };
        topicsCommand.SetAction((parse, ct) => RunAsync(parse, api, key, async client =>
        {
            string? cursor = null;
            do
            {
                HeraldApiTopicsPage page = await client.TopicsAsync(parse.GetValue(prefix), cursor, cancellationToken: ct);
                foreach (HeraldApiTopic t in page.Topics)
                {
                    Console.Out.WriteLine(string.Create(CultureInfo.InvariantCulture, $"{t.Subscribers,8}  {t.Pattern}"));
                }

                if (page.Silent.Count > 0)
                {
                    Console.Error.WriteLine($"not counted, did not answer in time: {string.Join(", ", page.Silent)}");
                }

                cursor = page.Next;
            }
            while (cursor is not null);
        }, ct));
        command.Subcommands.Add(topicsCommand);

        var info = new Command("info", "The answering node: name, version, cluster id and members, uptime, traffic");
        info.SetAction((parse, ct) => RunAsync(parse, api, key, async client =>
        {
            using JsonDocument document = await client.InfoAsync(ct);
            Console.Out.WriteLine(JsonSerializer.Serialize(document.RootElement, Indented));
        }, ct));
        command.Subcommands.Add(info);

        var name = new Option<string>("--name") { Description = "The key's name (what the broker's logs show)", Required = true, HelpName = "name" };
        var scope = new Option<string>("--scope") { Description = "publish, read, admin, or several joined by commas", DefaultValueFactory = _ => "publish", HelpName = "scope" };
        var index = new Option<int>("--index") { Description = "N in Herald:Api:Keys:N", DefaultValueFactory = _ => 0, HelpName = "n" };
        var newKey = new Command("new-key", "Make an API key: print it once, and the configuration that holds its SHA-256") { name, scope, index };
        newKey.SetAction(parse =>
        {
            string made = "hk_" + Convert.ToBase64String(RandomNumberGenerator.GetBytes(32)).TrimEnd('=').Replace('+', '-').Replace('/', '_');
            string hash = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes(made)));
            int n = parse.GetValue(index);
            Console.Out.WriteLine($"key:  {made}");
            Console.Out.WriteLine($"--Herald:Api:Keys:{n}:Name={parse.GetRequiredValue(name)} --Herald:Api:Keys:{n}:Hash={hash} --Herald:Api:Keys:{n}:Scope={parse.GetRequiredValue(scope)}");
            return ExitCodes.Ok;
        });
        command.Subcommands.Add(newKey);
        ApiClientCommands.Add(command, api, key);
        return command;
    }

    internal static Task<int> RunAsync(ParseResult parse, Option<string?> api, Option<string?> key, Func<HeraldApiClient, Task> body, CancellationToken cancellationToken) =>
        RunAsync(parse, api, key, async client =>
        {
            await body(client);
            return ExitCodes.Ok;
        }, cancellationToken);

    private static Task<int> RunAsync(ParseResult parse, Option<string?> api, Option<string?> key, Func<HeraldApiClient, Task<int>> body, CancellationToken cancellationToken) =>
        CommandRun.RunAsync(async () =>
        {
            string address = parse.GetValue(api) ?? Environment("HERALD_API_URL") ?? DefaultApi;
            string secret = parse.GetValue(key) ?? Environment("HERALD_API_KEY") ?? throw new CliException(ExitCodes.Usage, "no API key: pass --key or set HERALD_API_KEY");
            if (!Uri.TryCreate(address, UriKind.Absolute, out Uri? uri) || (uri.Scheme != Uri.UriSchemeHttp && uri.Scheme != Uri.UriSchemeHttps))
            {
                throw new CliException(ExitCodes.Usage, $"'{address}' is not a server API address: use http://host:8224");
            }

            using var client = new HeraldApiClient(uri, secret);
            return await body(client);
        }, cancellationToken);

    /// <summary>Each <c>Key=Value</c> as a header; a value without '=' is a usage error.</summary>
    private static Dictionary<string, string>? Headers(string[]? pairs)
    {
        if (pairs is not { Length: > 0 })
        {
            return null;
        }

        var headers = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (string pair in pairs)
        {
            int equals = pair.IndexOf('=', StringComparison.Ordinal);
            if (equals <= 0)
            {
                throw new CliException(ExitCodes.Usage, $"--header '{pair}' is not Key=Value");
            }

            headers[pair[..equals]] = pair[(equals + 1)..];
        }

        return headers;
    }

    internal static void Print<T>(T value) => Console.Out.WriteLine(JsonSerializer.Serialize(value, Json));

    private static string? Environment(string name) => System.Environment.GetEnvironmentVariable(name) is { Length: > 0 } value ? value : null;
}
