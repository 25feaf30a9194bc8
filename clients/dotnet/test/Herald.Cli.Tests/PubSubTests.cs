using System.Text;
using System.Text.Json;
using Herald.Cli.Tests.Infrastructure;

namespace Herald.Cli.Tests;

/// <summary><c>herald pub</c> and <c>herald sub</c> against the real broker, each a process of the packed tool.</summary>
[Collection(ToolCollection.Name)]
public sealed class PubSubTests(ToolFixture tool, OpenBroker fixture) : CliTest(tool), IClassFixture<OpenBroker>
{
    private string Server => fixture.Broker.TcpUrl;

    [Fact]
    public async Task Sub_with_a_wildcard_prints_each_published_message_as_a_json_line_and_exits_after_count()
    {
        string prefix = Unique("cli");
        await using HeraldRun sub = Start(["sub", prefix + ".*", "--count", "2", "--output", "json", "--server", Server]);
        await sub.WaitForErrorLineAsync("Subscribed to");

        // One token too deep for '*': never printed. The two after it are, in order, and then sub exits.
        AssertExit(0, await RunAsync(["pub", prefix + ".a.deep", "not for '*'", "--server", Server]));
        AssertExit(0, await RunAsync(["pub", prefix + ".a", "hello", "--header", "X-Tag=one", "-H", "X-Tag=two", "-H", "Empty=", "--server", Server]));
        AssertExit(0, await RunAsync(["pub", prefix + ".b", "--server", Server], stdin: Encoding.UTF8.GetBytes("from stdin")));

        Assert.Equal(0, await sub.WaitForExitAsync());
        string[] lines = sub.Output.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        Assert.Equal(2, lines.Length);
        using JsonDocument first = JsonDocument.Parse(lines[0]);
        Assert.Equal(prefix + ".a", first.RootElement.GetProperty("topic").GetString());
        Assert.Equal("hello", first.RootElement.GetProperty("payload").GetString());
        Assert.Equal(5, first.RootElement.GetProperty("size").GetInt32());
        Assert.False(first.RootElement.GetProperty("compressed").GetBoolean());
        Assert.Equal(["one", "two"], first.RootElement.GetProperty("headers").GetProperty("X-Tag").EnumerateArray().Select(v => v.GetString()));
        Assert.Equal([""], first.RootElement.GetProperty("headers").GetProperty("Empty").EnumerateArray().Select(v => v.GetString()));
        using JsonDocument second = JsonDocument.Parse(lines[1]);
        Assert.Equal(prefix + ".b", second.RootElement.GetProperty("topic").GetString());
        Assert.Equal("from stdin", second.RootElement.GetProperty("payload").GetString());
    }

    [Fact]
    public async Task Pub_count_fills_in_the_count_and_sub_prints_text_with_topic_size_and_headers()
    {
        string topic = Unique("cli.text");
        await using HeraldRun sub = Start(["sub", topic, "--count", "3", "--server", Server]);
        await sub.WaitForErrorLineAsync("Subscribed to");

        HeraldRun pub = await RunAsync(["pub", topic, "n={{Count}}", "--count", "3", "-H", "Kind=test", "--server", Server]);
        AssertExit(0, pub);
        Assert.Contains($"Published 3 messages (9 bytes) to '{topic}'", pub.Error, StringComparison.Ordinal);

        Assert.Equal(0, await sub.WaitForExitAsync());
        Assert.Equal(
            $"[#1] {topic} (3 bytes)\nKind: test\nn=1\n" +
            $"[#2] {topic} (3 bytes)\nKind: test\nn=2\n" +
            $"[#3] {topic} (3 bytes)\nKind: test\nn=3\n",
            sub.Output);
    }

    [Fact]
    public async Task Sub_prints_a_publishers_control_characters_in_header_values_escaped_never_raw()
    {
        string topic = Unique("cli.escape");
        await using HeraldRun sub = Start(["sub", topic, "--count", "2", "--server", Server]);
        await sub.WaitForErrorLineAsync("Subscribed to");

        // A title change, a bell, a screen clear and a direction override: a terminal would act on each.
        AssertExit(0, await RunAsync(["pub", topic, "plain", "-H", "Evil=\u001b]0;pwned\u0007\u001b[2Jgone\u202e", "--server", Server]));
        AssertExit(0, await RunAsync(["pub", topic, "--server", Server], stdin: Encoding.UTF8.GetBytes("fake\roverwritten")));

        Assert.Equal(0, await sub.WaitForExitAsync());
        Assert.Equal(
            $"[#1] {topic} (5 bytes)\nEvil: \\x1b]0;pwned\\x07\\x1b[2Jgone\\u{{202e}}\nplain\n" +
            $"[#2] {topic} (16 bytes)\n<16 bytes of binary: --output raw or json shows them>\n",
            sub.Output);
    }

    [Fact]
    public async Task Raw_output_is_the_payload_bytes_exactly_even_binary_from_stdin()
    {
        string topic = Unique("cli.raw");
        byte[] payload = [0x00, 0xFF, 0xC3, 0x28, (byte)'\n', 0x7F, 0x01];
        await using HeraldRun sub = Start(["sub", topic, "--count", "1", "-o", "raw", "--server", Server]);
        await sub.WaitForErrorLineAsync("Subscribed to");

        AssertExit(0, await RunAsync(["pub", topic, "--server", Server], stdin: payload));

        Assert.Equal(0, await sub.WaitForExitAsync());
        Assert.Equal(payload, sub.OutputBytes);
    }

    [Fact]
    public async Task Binary_payloads_print_as_base64_in_json_and_as_a_note_in_text()
    {
        string topic = Unique("cli.binary");
        byte[] payload = [0x00, 0xFF, 0x10];
        await using HeraldRun json = Start(["sub", topic, "--count", "1", "-o", "json", "--server", Server]);
        await using HeraldRun text = Start(["sub", topic, "--count", "1", "--server", Server]);
        await json.WaitForErrorLineAsync("Subscribed to");
        await text.WaitForErrorLineAsync("Subscribed to");

        AssertExit(0, await RunAsync(["pub", topic, "--server", Server], stdin: payload));

        Assert.Equal(0, await json.WaitForExitAsync());
        using JsonDocument line = JsonDocument.Parse(json.Output);
        Assert.Equal(payload, line.RootElement.GetProperty("payload_base64").GetBytesFromBase64());
        Assert.False(line.RootElement.TryGetProperty("payload", out _));
        Assert.Equal(0, await text.WaitForExitAsync());
        Assert.Equal($"[#1] {topic} (3 bytes)\n<3 bytes of binary: --output raw or json shows them>\n", text.Output);
    }
}
