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
}
