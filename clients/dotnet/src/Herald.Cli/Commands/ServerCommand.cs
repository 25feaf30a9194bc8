using System.CommandLine;
using System.Globalization;
using System.Net;
using System.Net.Http.Headers;
using System.Text;
using System.Text.Json;
using Herald.Cli.Settings;

namespace Herald.Cli.Commands;

/// <summary>
/// <c>herald server info|connz|subsz|health</c>: the broker's monitoring endpoints (<c>/varz</c>, <c>/connz</c>,
/// <c>/subsz</c>, <c>/healthz</c> with <c>/readyz</c>) on its monitoring listener, as a short summary or, with
/// <c>--json</c>, the endpoint's JSON pretty-printed. The monitoring token goes as a bearer token.
/// </summary>
internal static class ServerCommand
{
    private static readonly JsonWriterOptions Indented = new() { Indented = true, Encoder = System.Text.Encodings.Web.JavaScriptEncoder.UnsafeRelaxedJsonEscaping };

    public static Command Create(GlobalOptions globals)
    {
        var json = new Option<bool>("--json") { Description = "Print the endpoint's JSON instead of a summary", Recursive = true };
        var command = new Command("server", "Look at the broker through its monitoring listener (--monitor)") { json };

        var info = new Command("info", "Server name, version, ports, connections, subscriptions, message totals (/varz)");
        info.SetAction((parse, ct) => ShowAsync(parse, globals, json, "/varz", [], InfoSummary, ct));
        command.Subcommands.Add(info);

        Option<int> limit = Page("--limit", "Most entries to show", 100);
        Option<int> offset = Page("--offset", "Entries to skip", 0);
        var connz = new Command("connz", "Connections and long-poll sessions (/connz)") { limit, offset };
        connz.SetAction((parse, ct) => ShowAsync(parse, globals, json, "/connz", [("limit", parse.GetValue(limit)), ("offset", parse.GetValue(offset))], ConnzSummary, ct));
        command.Subcommands.Add(connz);

        var topic = new Option<string?>("--topic") { Description = "Only the patterns that match this topic" };
        var subsz = new Command("subsz", "Subscribed patterns, most subscribers first (/subsz)") { limit, offset, topic };
        subsz.SetAction((parse, ct) => ShowAsync(parse, globals, json, "/subsz" + (parse.GetValue(topic) is { } t ? "?topic=" + Uri.EscapeDataString(t) : ""), [("limit", parse.GetValue(limit)), ("offset", parse.GetValue(offset))], SubszSummary, ct));
        command.Subcommands.Add(subsz);

        var health = new Command("health", "Whether the broker is alive and ready (/healthz, /readyz); exit 1 when not ready");
        health.SetAction((parse, ct) => CommandRun.RunAsync(() => HealthAsync(parse, globals, json, ct), ct));
        command.Subcommands.Add(health);
        return command;
    }

    private static Option<int> Page(string name, string description, int defaultValue)
    {
        var option = new Option<int>(name) { Description = description, DefaultValueFactory = _ => defaultValue, HelpName = "n" };
        option.Validators.Add(r =>
        {
            if (r.GetValueOrDefault<int>() < 0)
            {
                r.AddError($"{name} must be 0 or more.");
            }
        });
        return option;
    }

    private static Task<int> ShowAsync(ParseResult parse, GlobalOptions globals, Option<bool> json, string path, (string Name, int Value)[] query, Func<JsonElement, string> summary, CancellationToken cancellationToken) =>
        CommandRun.RunAsync(async () =>
        {
            string separator = path.Contains('?', StringComparison.Ordinal) ? "&" : "?";
            string full = path + string.Concat(query.Select((q, i) => (i == 0 ? separator : "&") + q.Name + "=" + q.Value.ToString(CultureInfo.InvariantCulture)));
            (HttpStatusCode _, JsonDocument document) = await GetAsync(CommandRun.Settings(parse, globals), full, allowUnavailable: false, cancellationToken);
            using (document)
            {
                Console.Out.Write(parse.GetValue(json) ? Pretty(document) : summary(document.RootElement));
            }

            return ExitCodes.Ok;
        }, cancellationToken);

    private static async Task<int> HealthAsync(ParseResult parse, GlobalOptions globals, Option<bool> json, CancellationToken cancellationToken)
    {
        ConnectionSettings settings = CommandRun.Settings(parse, globals);
        (HttpStatusCode _, JsonDocument alive) = await GetAsync(settings, "/healthz", allowUnavailable: true, cancellationToken);
        (HttpStatusCode readyStatus, JsonDocument ready) = await GetAsync(settings, "/readyz", allowUnavailable: true, cancellationToken);
        using (alive)
        using (ready)
        {
            if (parse.GetValue(json))
            {
                Console.Out.Write(Pretty(ready));
            }
            else
            {
                JsonElement r = ready.RootElement;
                var text = new StringBuilder();
                text.Append(CultureInfo.InvariantCulture, $"alive: {Str(alive.RootElement, "status")}\n");
                text.Append(CultureInfo.InvariantCulture, $"ready: {Str(r, "status")}\n");
                text.Append(CultureInfo.InvariantCulture, $"tcp ports: {Str(r, "tcp_ports")}, http port: {Str(r, "http_port")}, policy: {Str(r, "policy")}\n");
                if (r.TryGetProperty("cluster", out JsonElement cluster))
                {
                    text.Append(CultureInfo.InvariantCulture, $"cluster: {cluster}\n");
                }

                Console.Out.Write(text.ToString());
            }

            return readyStatus == HttpStatusCode.OK ? ExitCodes.Ok : ExitCodes.Failure;
        }
    }

    /// <summary>GETs <paramref name="path"/> of the monitoring listener; refusals and unreachable listeners become their exit codes.</summary>
    private static async Task<(HttpStatusCode, JsonDocument)> GetAsync(ConnectionSettings settings, string path, bool allowUnavailable, CancellationToken cancellationToken)
    {
        TrustedCa? ca = TrustedCa.From(settings.TlsCa);
        using var handler = new SocketsHttpHandler { ConnectTimeout = TimeSpan.FromSeconds(10) };
        if (ca is not null)
        {
            handler.SslOptions.RemoteCertificateValidationCallback = ca.Validate;
        }

        using var http = new HttpClient(handler) { Timeout = TimeSpan.FromSeconds(30) };
        if (!Uri.TryCreate(settings.Monitor.TrimEnd('/') + path, UriKind.Absolute, out Uri? uri) || (uri.Scheme != Uri.UriSchemeHttp && uri.Scheme != Uri.UriSchemeHttps))
        {
            throw new CliException(ExitCodes.Usage, $"'{settings.Monitor}' is not a monitoring address: use http://host:8222");
        }

        using var request = new HttpRequestMessage(HttpMethod.Get, uri);
        if (settings.MonitorToken is { } token)
        {
            request.Headers.Authorization = new AuthenticationHeaderValue("Bearer", token);
        }

        using HttpResponseMessage response = await http.SendAsync(request, cancellationToken);
        if (response.StatusCode is HttpStatusCode.Unauthorized or HttpStatusCode.Forbidden)
        {
            throw new CliException(ExitCodes.Refused, settings.MonitorToken is null
                ? $"{uri}: {(int)response.StatusCode} {response.ReasonPhrase}: the monitoring listener wants a token (--monitor-token, HERALD_MONITOR_TOKEN or the context's monitor_token)"
                : $"{uri}: {(int)response.StatusCode} {response.ReasonPhrase}: the monitoring listener refused the token");
        }

        if (!response.IsSuccessStatusCode && !(allowUnavailable && response.StatusCode == HttpStatusCode.ServiceUnavailable))
        {
            throw new CliException(ExitCodes.Failure, $"{uri}: {(int)response.StatusCode} {response.ReasonPhrase}" +
                (response.StatusCode == HttpStatusCode.NotFound ? " (is --monitor the monitoring listener, and monitoring on?)" : ""));
        }

        string body = await response.Content.ReadAsStringAsync(cancellationToken);
        try
        {
            return (response.StatusCode, JsonDocument.Parse(body));
        }
        catch (JsonException)
        {
            throw new CliException(ExitCodes.Failure, $"{uri} did not answer JSON: is --monitor a Herald monitoring listener?");
        }
    }

    private static string Pretty(JsonDocument document)
    {
        using var buffer = new MemoryStream();
        using (var writer = new Utf8JsonWriter(buffer, Indented))
        {
            document.WriteTo(writer);
        }

        return Encoding.UTF8.GetString(buffer.ToArray()) + "\n";
    }

    private static string InfoSummary(JsonElement v)
    {
        JsonElement ports = v.GetProperty("ports");
        JsonElement messages = v.GetProperty("messages");
        var text = new StringBuilder();
        text.Append(CultureInfo.InvariantCulture, $"Server:         {Str(v, "server_name")} (Herald {Str(v, "version")}, {Str(v, "runtime")})\n");
        text.Append(CultureInfo.InvariantCulture, $"Host:           {Str(v, "host")}, pid {Str(v, "pid")}, {Str(v, "status")}, up {Str(v, "uptime")}\n");
        text.Append(CultureInfo.InvariantCulture, $"Ports:          tcp {Range(Str(ports, "tcp_first"), Str(ports, "tcp_last"))}, http {Str(ports, "http")}, monitoring {Str(ports, "monitoring")}\n");
        text.Append(CultureInfo.InvariantCulture, $"Connections:    {Str(v, "connections")} ({Str(v, "long_poll_sessions")} long-poll sessions), {Str(v, "total_connections")} since start\n");
        text.Append(CultureInfo.InvariantCulture, $"Subscriptions:  {Str(v, "subscriptions")} on {Str(v, "topics")} topics and patterns\n");
        text.Append(CultureInfo.InvariantCulture, $"Messages:       {Str(messages, "published")} published ({Str(messages, "published_bytes")} bytes), {Str(messages, "delivered")} delivered, {Str(messages, "dropped")} dropped\n");
        text.Append(CultureInfo.InvariantCulture, $"Slow consumers: {Str(v, "slow_consumers")}, protocol errors: {Str(v, "protocol_errors")}\n");
        return text.ToString();
    }

    private static string ConnzSummary(JsonElement c)
    {
        var text = new StringBuilder();
        text.Append(CultureInfo.InvariantCulture, $"{Str(c, "num_connections")} of {Str(c, "total")} connections\n");
        text.Append(CultureInfo.InvariantCulture, $"{"CID",6}  {"TRANSPORT",-9}  {"ADDRESS",-21}  {"NAME",-20}  {"SUBS",5}  {"PENDING",7}  {"DROPPED",7}\n");
        foreach (JsonElement row in c.GetProperty("connections").EnumerateArray())
        {
            string address = row.TryGetProperty("ip", out _) ? $"{Str(row, "ip")}:{Str(row, "port")}" : "-";
            text.Append(CultureInfo.InvariantCulture, $"{Str(row, "cid"),6}  {Str(row, "transport"),-9}  {address,-21}  {Str(row, "name"),-20}  {Str(row, "subscriptions"),5}  {Str(row, "pending_messages"),7}  {Str(row, "dropped"),7}\n");
        }

        return text.ToString();
    }

    private static string SubszSummary(JsonElement s)
    {
        var text = new StringBuilder();
        text.Append(CultureInfo.InvariantCulture, $"{Str(s, "num_subscriptions")} subscriptions on {Str(s, "num_patterns")} patterns ({Str(s, "num_inbox_patterns")} reply inboxes, not listed)\n");
        foreach (JsonElement row in s.GetProperty("patterns").EnumerateArray())
        {
            text.Append(CultureInfo.InvariantCulture, $"{Str(row, "subscribers"),6}  {Str(row, "pattern")}\n");
        }

        return text.ToString();
    }

    private static string Range(string first, string last) => first == last ? first : $"{first}-{last}";

    /// <summary>A property as text, <c>-</c> when absent (an older or newer broker).</summary>
    private static string Str(JsonElement element, string name) =>
        element.ValueKind == JsonValueKind.Object && element.TryGetProperty(name, out JsonElement value)
            ? value.ValueKind == JsonValueKind.String ? value.GetString()! : value.ToString()
            : "-";
}
