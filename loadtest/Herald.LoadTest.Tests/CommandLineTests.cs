using System.Text.Json;
using System.Text.Json.Serialization;

namespace Herald.LoadTest.Tests;

/// <summary>
/// The load tool's command line: every command line of the scripts and docs (CommandLines/vectors.txt) reads
/// to the settings it read to before, and the wrong ones are refused naming the option.
/// </summary>
public class CommandLineTests
{
    private static readonly JsonSerializerOptions Json = new() { Converters = { new JsonStringEnumConverter() } };

    private static readonly string Existing = typeof(CommandLineTests).Assembly.Location;

    /// <summary>(command line, expected line) pairs of vectors.txt.</summary>
    public static TheoryData<string, string> Vectors
    {
        get
        {
            string[] lines = [.. File.ReadAllLines(Path.Combine(AppContext.BaseDirectory, "CommandLines", "vectors.txt")).Where(l => l.Length > 0 && !l.StartsWith('#'))];
            var data = new TheoryData<string, string>();
            for (int i = 0; i + 1 < lines.Length; i += 2)
            {
                data.Add(lines[i], lines[i + 1]);
            }

            return data;
        }
    }

    /// <summary>The settings a command line reads to, as JSON with the repository's and the test's paths put back as placeholders; or "usage: message".</summary>
    internal static string Read(string commandLine)
    {
        string[] args = commandLine.Replace("$EXISTING", Existing, StringComparison.Ordinal).Split(' ', StringSplitOptions.RemoveEmptyEntries);
        try
        {
            return JsonSerializer.Serialize(Program.ReadSettings(args), Json).Replace(JsonEncodedText.Encode(Existing).ToString(), "$EXISTING", StringComparison.Ordinal);
        }
        catch (UsageException e)
        {
            return "usage: " + e.Message;
        }
    }

    [Theory]
    [MemberData(nameof(Vectors))]
    public void A_command_line_reads_to_the_settings_it_always_did(string commandLine, string expected)
    {
        string actual = Read(commandLine);
        if (expected.StartsWith("usage", StringComparison.Ordinal))
        {
            Assert.StartsWith("usage: ", actual, StringComparison.Ordinal);
            Assert.Contains(expected["usage".Length..].Trim(), actual, StringComparison.Ordinal);
        }
        else
        {
            Assert.Equal(expected, actual);
        }
    }

    /// <summary>Runs the tool in-process with <paramref name="args"/>: its exit code and what it wrote to standard output and error.</summary>
    private static async Task<(int Exit, string Output, string Errors)> RunCapturedAsync(params string[] args)
    {
        TextWriter output = Console.Out, errors = Console.Error;
        var capturedOutput = new StringWriter();
        var capturedErrors = new StringWriter();
        Console.SetOut(capturedOutput);
        Console.SetError(capturedErrors);
        try
        {
            int exit = await Program.RunAsync(args, CancellationToken.None);
            return (exit, capturedOutput.ToString(), capturedErrors.ToString());
        }
        finally
        {
            Console.SetOut(output);
            Console.SetError(errors);
        }
    }

    public static TheoryData<string, string[]> HelpLines => new()
    {
        { "fanout", ["--subscribers <N>", "subscriber connections [default: 100]", "--header-bytes <N>", "--warmup <S>", "--topic <NAME>", "[default: bench.fanout]", "--target <herald|nats|redis|signalr|cluster>", "--transport <tcp|tls|websocket|longpoll>", "--ports <A-B>", "[default: 4502-4534]", "--broker-dll <PATH>"] },
        { "rpc", ["--mode <twoway|oneway>", "--payload <small|composite|list42>", "--callers <N>", "--queue <NAME>", "--responder-token <T>", "[default: bench.rpc]", "--token <TOKEN>"] },
        { "broadcast", ["--subscribers <N>", "--search", "--periods <P1,P2,...>", "--stop-on-miss", "--chart <PATH>", "--sources <N>", "--transport <tcp|tls|websocket|longpoll>"] },
        { "compression", ["--class <C>", "--mode <M>", "--link-mbps <R>", "--external", "--broker-pid <N>", "--port <N>", "[default: 4702]", "--host <HOST>"] },
        { "collab", ["--preset <all|100x5-d1|", "2000x2-d15>", "--rooms <N>", "--late-ms <S>", "--target <herald|nats|redis|signalr|cluster>"] },
        { "stream", ["--messages <N>", "--warmup <N>", "--max-lead <N>", "--strings <N>", "[default: 5]", "--max-seconds <S>", "[default: 60]"] },
        { "connections", ["--steps <LIST>", "--max <N|limit>", "--receive-buffer <N>", "--warmup <N>", "[default: 100]", "--server <start|external>"] },
        { "stalled", ["--stalled <N>", "--policy <disconnect|drop-oldest>", "--rss-base-mb <S>", "[default: bench.stalled]", "--seconds <S>"] },
        { "chart", ["--in <A.json,B.json>", "(REQUIRED)", "--out <PATH>", "[default: loadtest/results/broadcast]"] },
        { "compare", ["fanout", "rpc", "broadcast", "collab", "stream", "connections", "stalled"] },
    };

    [Theory]
    [MemberData(nameof(HelpLines))]
    public async Task Help_lists_a_command_s_options_with_their_values_and_defaults(string command, string[] lines)
    {
        (int exit, string help, _) = await RunCapturedAsync(command, "--help");

        Assert.Equal(ExitCodes.Ok, exit);
        foreach (string line in lines)
        {
            Assert.Contains(line, help, StringComparison.Ordinal);
        }
    }

    [Fact]
    public async Task Help_of_compare_s_scenario_lists_compare_s_options_and_the_scenario_s_but_not_what_compare_sets()
    {
        (int exit, string help, _) = await RunCapturedAsync("compare", "fanout", "--help");

        Assert.Equal(ExitCodes.Ok, exit);
        Assert.Contains("--targets <LIST>", help, StringComparison.Ordinal);
        Assert.Contains("--baseline <DLL>", help, StringComparison.Ordinal);
        Assert.Contains("--subscribers <N>", help, StringComparison.Ordinal);
        Assert.Contains("--ports <A-B>", help, StringComparison.Ordinal);
        Assert.DoesNotContain("--target <", help, StringComparison.Ordinal);
        Assert.DoesNotContain("--transport <", help, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData("--subscribers", "fanout", "--subscribers", "0")]
    [InlineData("--subscribers", "fanout", "--subscribers", "many")]
    [InlineData("--bogus", "fanout", "--bogus", "1")]
    [InlineData("--transport", "fanout", "--transport", "carrier-pigeon")]
    [InlineData("--mode", "rpc", "--mode", "sideways")]
    [InlineData("--ports", "stream", "--ports", "4534-4502")]
    [InlineData("--seconds", "fanout", "--seconds", "5", "--seconds", "6")]
    [InlineData("--search", "broadcast", "--subscribers", "10", "--search")]
    [InlineData("--target", "compare", "fanout", "--target", "nats")]
    [InlineData("--in", "chart")]
    public async Task A_wrong_command_line_exits_2_with_a_message_naming_the_option(string option, params string[] args)
    {
        (int exit, _, string errors) = await RunCapturedAsync(args);

        Assert.Equal(ExitCodes.Usage, exit);
        Assert.Contains(option, errors, StringComparison.Ordinal);
        Assert.Contains("--help` lists the options.", errors, StringComparison.Ordinal);
    }

    [Fact]
    public async Task No_command_lists_the_commands_and_exits_2()
    {
        (int exit, string help, _) = await RunCapturedAsync();

        Assert.Equal(ExitCodes.Usage, exit);
        foreach (string command in Program.Scenarios.Select(s => s.Name))
        {
            Assert.Contains(command, help, StringComparison.Ordinal);
        }

        Assert.DoesNotContain("signalr-server", help, StringComparison.Ordinal); // hidden: the SignalR target's own server
    }

    [Theory]
    [InlineData("[suggest:14]", "fanout --trans", "--transport")]
    [InlineData("[suggest:19]", "fanout --transport ", "websocket")]
    [InlineData("[suggest:17]", "fanout --target c", "cluster")]
    [InlineData("[suggest:17]", "compare fanout --", "--baseline")]
    [InlineData("[suggest:5]", "colla", "collab")]
    public async Task The_suggest_directive_completes_commands_options_and_values(string directive, string commandLine, string expected)
    {
        (int exit, string suggestions, _) = await RunCapturedAsync(directive, commandLine);

        Assert.Equal(ExitCodes.Ok, exit);
        Assert.Contains(expected, suggestions.Split('\n', StringSplitOptions.TrimEntries));
    }
}
