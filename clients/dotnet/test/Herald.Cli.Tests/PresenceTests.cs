using System.Text.Json;
using Herald.Cli.Tests.Infrastructure;

namespace Herald.Cli.Tests;

/// <summary>
/// <c>herald presence</c> and <c>herald sub --join --info --presence-events</c> against the real broker (spec §15), each a
/// process of the packed tool: a member seen by the query and the occupancy, events printed in their turn among the
/// messages and marked as events, and the refusals with their exit codes.
/// </summary>
[Collection(ToolCollection.Name)]
public sealed class PresenceTests(ToolFixture tool, OpenBroker fixture) : CliTest(tool), IClassFixture<OpenBroker>
{
    private string Server => fixture.Broker.TcpUrl;

    [Fact]
    public async Task Sub_join_makes_a_member_that_presence_lists_with_its_info_and_occupancy_counts()
    {
        string topic = Unique("cli.room");
        await using HeraldRun member = Start(["sub", topic, "--join", "--info", "Ada Lovelace", "--server", Server]);
        await member.WaitForErrorLineAsync("and present there");

        HeraldRun text = await RunAsync(["presence", topic, "--server", Server]);
        HeraldRun json = await RunAsync(["presence", topic, "--json", "--server", Server]);
        HeraldRun occupancy = await RunAsync(["presence", topic, "--occupancy", "--json", "--server", Server]);
        HeraldRun none = await RunAsync(["presence", topic, "--limit", "0", "--occupancy", "--server", Server]);

        AssertExit(0, text);
        string[] lines = text.Output.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        Assert.Equal($"{topic}: 1 member, 1 identity", lines[0]);
        string[] fields = Assert.Single(lines[1..]).Split('\t');
        Assert.Equal(["-", "Ada Lovelace"], fields[1..]); // anonymous identity, then the info
        AssertExit(0, json);
        using JsonDocument listed = JsonDocument.Parse(json.Output);
        Assert.Equal(1, listed.RootElement.GetProperty("members").GetInt64());
        JsonElement entry = Assert.Single(listed.RootElement.GetProperty("entries").EnumerateArray());
        Assert.Equal((fields[0], "", "Ada Lovelace"), (entry.GetProperty("client").GetString(), entry.GetProperty("identity").GetString(), entry.GetProperty("info").GetString()));
        Assert.False(listed.RootElement.GetProperty("truncated").GetBoolean());
        AssertExit(0, occupancy);
        using JsonDocument counts = JsonDocument.Parse(occupancy.Output);
        Assert.Equal((1, 1), (counts.RootElement.GetProperty("members").GetInt64(), counts.RootElement.GetProperty("identities").GetInt64()));
        Assert.False(counts.RootElement.TryGetProperty("entries", out _));
        AssertExit(0, none);
        Assert.Equal($"{topic}: 1 member, 1 identity\n", none.Output);
    }

    [Fact]
    public async Task Sub_presence_events_prints_joins_and_leaves_marked_in_their_turn_among_the_messages()
    {
        string topic = Unique("cli.events");
        await using HeraldRun watcher = Start(["sub", topic, "--presence-events", "--count", "2", "--output", "json", "--server", Server]);
        await watcher.WaitForErrorLineAsync("Subscribed to");
        await using HeraldRun member = Start(["sub", topic, "--join", "--info", "Grace", "--count", "1", "--server", Server]);
        await member.WaitForErrorLineAsync("and present there");

        AssertExit(0, await RunAsync(["pub", topic, "hi", "--server", Server]));
        Assert.Equal(0, await member.WaitForExitAsync()); // it had its one message: it unsubscribes, and so leaves
        AssertExit(0, await RunAsync(["pub", topic, "bye", "--server", Server]));

        Assert.Equal(0, await watcher.WaitForExitAsync());
        JsonElement[] lines = [.. watcher.Output.Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => JsonDocument.Parse(l).RootElement)];
        Assert.Equal(
            ["presence join Grace 1", "message hi", "presence leave unsubscribe 0", "message bye"],
            lines.Select(l => l.TryGetProperty("presence", out JsonElement kind)
                ? $"presence {kind.GetString()} {(l.TryGetProperty("info", out JsonElement info) ? info.GetString() : l.GetProperty("reason").GetString())} {l.GetProperty("occupancy").GetInt64()}"
                : $"message {l.GetProperty("payload").GetString()}"));
    }

    [Fact]
    public async Task Presence_on_a_wildcard_and_join_on_a_pattern_exit_2_and_an_info_over_the_bound_exits_2()
    {
        HeraldRun wildcard = await RunAsync(["presence", "cli.*", "--server", Server]);
        HeraldRun pattern = await RunAsync(["sub", "cli.>", "--join", "--server", Server]);
        HeraldRun info = await RunAsync(["sub", Unique("cli.info"), "--join", "--info", new string('x', 300), "--server", Server]);

        AssertExit(2, wildcard);
        AssertNoStackTrace(wildcard);
        AssertExit(2, pattern);
        Assert.Contains("wildcards", pattern.Error, StringComparison.Ordinal);
        AssertExit(2, info);
        Assert.Contains("--info", info.Error, StringComparison.Ordinal);
        AssertNoStackTrace(info);
    }
}

/// <summary>An identity without presence rights (the token broker's <c>cli</c>: publish and subscribe only).</summary>
[Collection(ToolCollection.Name)]
public sealed class PresenceRefusalTests(ToolFixture tool, TokenBroker fixture) : CliTest(tool), IClassFixture<TokenBroker>
{
    [Fact]
    public async Task Reading_presence_without_the_right_exits_4_and_prints_no_count()
    {
        var token = new Dictionary<string, string> { ["HERALD_TOKEN"] = TokenBroker.Token };
        HeraldRun list = await RunAsync(["presence", "cli.room", "--server", fixture.Broker.TcpUrl], token);
        HeraldRun count = await RunAsync(["presence", "cli.room", "--occupancy", "--server", fixture.Broker.TcpUrl], token);
        HeraldRun join = await RunAsync(["sub", "cli.room", "--join", "--server", fixture.Broker.TcpUrl], token);

        AssertExit(4, list);
        Assert.Contains("permission denied", list.Error, StringComparison.Ordinal);
        Assert.Empty(list.Output);
        AssertExit(4, count);
        Assert.Empty(count.Output);
        AssertExit(4, join);
        AssertNoStackTrace(join);
    }
}
