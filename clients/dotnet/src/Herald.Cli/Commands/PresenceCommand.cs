using System.CommandLine;
using System.Text;
using System.Text.Encodings.Web;
using System.Text.Json;
using Herald.Cli.Output;
using Herald.Cli.Settings;
using Herald.Client;

namespace Herald.Cli.Commands;

/// <summary>
/// <c>herald presence TOPIC</c>: who is on a topic (spec §15.3): its occupancy, then its members (client id, identity,
/// client info) page after page, at most <c>--limit</c>; <c>--occupancy</c> asks for the counts alone (the cheap call
/// for large topics); <c>--json</c> prints one object for programs. A refusal exits 4 (no permission to read the topic's
/// presence: nothing is printed, not even the count).
/// </summary>
internal static class PresenceCommand
{
    private static readonly JsonWriterOptions JsonOptions = new() { Encoder = JavaScriptEncoder.UnsafeRelaxedJsonEscaping, Indented = false };

    public static Command Create(GlobalOptions globals)
    {
        var topic = new Argument<string>("topic") { Description = "One topic (no wildcards): presence is of one topic" };
        var limit = new Option<int>("--limit", "-n") { Description = "Print at most N members (0: all); the occupancy counts them all", DefaultValueFactory = _ => 0, HelpName = "n" };
        limit.Validators.Add(result =>
        {
            if (result.GetValueOrDefault<int>() < 0)
            {
                result.AddError("--limit must be 0 or more.");
            }
        });
        var occupancy = new Option<bool>("--occupancy") { Description = "Only the number of members and of distinct identities" };
        var json = new Option<bool>("--json") { Description = "One JSON object: topic, members, identities and (without --occupancy) entries [{client, identity, info}]" };
        var command = new Command("presence", "Show who is on a topic (its members and occupancy)") { topic, limit, occupancy, json };
        command.SetAction((parse, cancellationToken) => CommandRun.RunAsync(async () =>
        {
            string name = parse.GetRequiredValue(topic);
            int most = parse.GetValue(limit);
            await using HeraldClient client = await BrokerConnection.OpenAsync(CommandRun.Settings(parse, globals), "herald-presence", cancellationToken);
            HeraldOccupancy counts;
            var members = new List<HeraldPresenceMember>();
            bool more = false;
            if (parse.GetValue(occupancy))
            {
                counts = await client.OccupancyAsync(name, cancellationToken);
            }
            else
            {
                string? cursor = null;
                do
                {
                    int page = most == 0 ? 1_000 : Math.Min(1_000, most - members.Count);
                    HeraldPresencePage answer = await client.PresenceAsync(name, page, cursor, cancellationToken);
                    counts = answer.Occupancy;
                    members.AddRange(answer.Members);
                    cursor = answer.Next;
                }
                while (cursor is not null && (most == 0 || members.Count < most));

                more = cursor is not null;
            }

            Stream stdout = Console.OpenStandardOutput();
            byte[] text = parse.GetValue(json) ? Json(name, counts, parse.GetValue(occupancy) ? null : members, more) : Encoding.UTF8.GetBytes(Text(name, counts, members, more));
            await stdout.WriteAsync(text, cancellationToken);
            await stdout.FlushAsync(cancellationToken);
            return ExitCodes.Ok;
        }, cancellationToken));
        return command;
    }

    /// <summary>
    /// <c>room.1: 2 members, 2 identities</c>, then a line per member: client id, identity (<c>-</c> when anonymous) and
    /// info, tab-separated, escaped as sub escapes what a publisher sent (the info is another client's text).
    /// </summary>
    private static string Text(string topic, HeraldOccupancy counts, List<HeraldPresenceMember> members, bool more)
    {
        var text = new StringBuilder();
        text.Append(MessageWriter.Escaped(topic)).Append(": ").Append(counts.Members).Append(counts.Members == 1 ? " member, " : " members, ")
            .Append(counts.Identities).Append(counts.Identities == 1 ? " identity\n" : " identities\n");
        foreach (HeraldPresenceMember member in members)
        {
            text.Append(MessageWriter.Escaped(member.Client)).Append('\t').Append(member.Identity.Length == 0 ? "-" : MessageWriter.Escaped(member.Identity));
            if (member.Info is { } info)
            {
                text.Append('\t').Append(MessageWriter.Escaped(info));
            }

            text.Append('\n');
        }

        if (more)
        {
            text.Append("(more members than --limit: ").Append(members.Count).Append(" shown)\n");
        }

        return text.ToString();
    }

    /// <summary><c>{"topic","members","identities","entries":[{"client","identity","info"}],"truncated"}</c>; no entries with <c>--occupancy</c>.</summary>
    private static byte[] Json(string topic, HeraldOccupancy counts, List<HeraldPresenceMember>? members, bool more)
    {
        var buffer = new MemoryStream();
        using (var json = new Utf8JsonWriter(buffer, JsonOptions))
        {
            json.WriteStartObject();
            json.WriteString("topic", topic);
            json.WriteNumber("members", counts.Members);
            json.WriteNumber("identities", counts.Identities);
            if (members is not null)
            {
                json.WriteStartArray("entries");
                foreach (HeraldPresenceMember member in members)
                {
                    json.WriteStartObject();
                    json.WriteString("client", member.Client);
                    json.WriteString("identity", member.Identity);
                    if (member.Info is { } info)
                    {
                        json.WriteString("info", info);
                    }
                    else
                    {
                        json.WriteNull("info");
                    }

                    json.WriteEndObject();
                }

                json.WriteEndArray();
                json.WriteBoolean("truncated", more);
            }

            json.WriteEndObject();
        }

        buffer.WriteByte((byte)'\n');
        return buffer.ToArray();
    }
}
