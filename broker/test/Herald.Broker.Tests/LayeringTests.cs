using System.Reflection;
using System.Text;
using System.Text.RegularExpressions;
using NetArchTest.Rules;

namespace Herald.Broker.Tests;

/// <summary>
/// The broker's rooms depend on each other one way only, top to bottom (broker/ARCHITECTURE.md). A room
/// that starts to use one above it, a cycle, fails here, named with the types that do it. The check reads
/// the compiled IL (NetArchTest over Mono.Cecil), so a dependency hidden in a method body counts too; a second
/// check reads the source, so what the compiler copies into the IL (a <c>const</c>, a <c>nameof</c>) counts as well.
/// </summary>
public sealed partial class LayeringTests
{
    /// <summary>Top to bottom. Transports' sub-rooms (Tcp, LongPoll, WebSockets, Sse) are one layer and must not use each other.</summary>
    public static readonly string[] Layers =
    [
        "Hosting",
        "Api",
        "Monitoring",
        "Policy",
        "Transports",
        "Sessions",
        "Cluster",
        "Engines",
        "History",
        "Security",
        "Routing",
        "Compression",
        "Delivery",
        "Telemetry",
    ];

    public static TheoryData<string> Rooms => [.. Layers.Skip(1)];

    private static readonly Assembly Broker = typeof(Herald.Broker.Hosting.HeraldOptions).Assembly;

    [Theory]
    [MemberData(nameof(Rooms))]
    public void A_room_depends_on_no_room_above_it(string room)
    {
        string[] above = Layers.TakeWhile(layer => layer != room).Select(layer => $"Herald.Broker.{layer}").ToArray();

        TestResult result = Types.InAssembly(Broker).That().ResideInNamespace($"Herald.Broker.{room}").ShouldNot().HaveDependencyOnAny(above).GetResult();

        Assert.True(result.IsSuccessful, $"Herald.Broker.{room} uses a room above it ({string.Join(", ", above)}): {string.Join(", ", result.FailingTypeNames ?? [])}");
    }

    [Fact]
    public void Every_room_is_in_the_layer_list()
    {
        string[] rooms = Broker.GetTypes()
            .Select(t => t.Namespace)
            .OfType<string>()
            .Where(ns => ns.StartsWith("Herald.Broker.", StringComparison.Ordinal))
            .Select(ns => ns["Herald.Broker.".Length..].Split('.')[0])
            .Distinct()
            .Order()
            .ToArray();

        Assert.Equal(Layers.Order(), rooms);
    }

    /// <summary>The sub-rooms of Transports (one per transport), found from the namespaces.</summary>
    private static string[] Transports() => Broker.GetTypes()
        .Select(t => t.Namespace)
        .OfType<string>()
        .Where(ns => ns.StartsWith("Herald.Broker.Transports.", StringComparison.Ordinal))
        .Select(ns => ns["Herald.Broker.Transports.".Length..].Split('.')[0])
        .Distinct()
        .Order()
        .ToArray();

    [Fact]
    public void The_transports_do_not_use_each_other()
    {
        string[] transports = Transports();
        string[] known = ["Tcp", "LongPoll", "WebSockets", "Sse"];
        Assert.True(known.All(transports.Contains), $"the transports found ({string.Join(", ", transports)}) miss one of {string.Join(", ", known)}");

        var failures = new List<string>();
        foreach (string transport in transports)
        {
            foreach (string other in transports.Where(t => t != transport))
            {
                TestResult result = Types.InAssembly(Broker).That().ResideInNamespace($"Herald.Broker.Transports.{transport}")
                    .ShouldNot().HaveDependencyOn($"Herald.Broker.Transports.{other}").GetResult();
                if (!result.IsSuccessful)
                {
                    failures.Add($"{transport} uses {other}: {string.Join(", ", result.FailingTypeNames ?? [])}");
                }
            }
        }

        Assert.True(failures.Count == 0, string.Join(Environment.NewLine, failures));
    }

    /// <summary>
    /// The same rule read from the source, for what the IL does not show: a <c>const</c> or a <c>nameof</c> of a room above is
    /// copied in by the compiler. Every file under broker/src/Herald.Broker (comments and string literals removed) must not
    /// name <c>Herald.Broker.&lt;a room above&gt;</c>, nor a type declared only in rooms above its own (for a transport: nor
    /// another transport's). A name a room at or below declares too (a member, an enum value, a local) is not counted.
    /// </summary>
    [Fact]
    public void No_source_file_names_a_room_above_it()
    {
        string source = Path.Combine(OperationsDeployTests.RepositoryRoot(), "broker", "src", "Herald.Broker");
        string separator = Path.DirectorySeparatorChar.ToString();
        var files = Directory.GetFiles(source, "*.cs", SearchOption.AllDirectories)
            .Where(f => !Path.GetRelativePath(source, f).Split(separator).Any(part => part is "obj" or "bin"))
            .Select(f => (Path: Path.GetRelativePath(source, f), Text: WithoutCommentsAndStrings(File.ReadAllText(f))))
            .Select(f => (f.Path, f.Text, Room: Namespace().Match(f.Text) is { Success: true } m ? m.Groups[1].Value : null))
            .Where(f => f.Room is not null)
            .ToArray();
        Assert.True(files.Length > 50, $"only {files.Length} source files found under {source}");

        var types = new HashSet<string>(StringComparer.Ordinal);
        var declaredIn = new Dictionary<string, HashSet<string>>(StringComparer.Ordinal); // a name -> the rooms declaring it (types, members, enum values)
        void Declare(string name, string room)
        {
            if (!declaredIn.TryGetValue(name, out HashSet<string>? rooms))
            {
                declaredIn[name] = rooms = [];
            }

            rooms.Add(room);
        }

        foreach ((string _, string text, string? room) in files)
        {
            foreach (Match m in TypeDeclaration().Matches(text))
            {
                string name = m.Groups[1].Success ? m.Groups[1].Value : m.Groups[2].Value;
                types.Add(name);
                Declare(name, room!);
            }

            foreach (Match m in MemberDeclaration().Matches(text))
            {
                if (!Keywords.Contains(m.Groups[1].Value))
                {
                    Declare(m.Groups[2].Value, room!);
                }
            }

            foreach (Match e in EnumBody().Matches(text))
            {
                foreach (string value in e.Groups[1].Value.Split(','))
                {
                    if (EnumValue().Match(value) is { Success: true } v)
                    {
                        Declare(v.Groups[1].Value, room!);
                    }
                }
            }
        }

        var failures = new List<string>();
        foreach ((string path, string text, string? room) in files)
        {
            HashSet<string> forbidden = Forbidden(room!);
            string[] lines = text.Split('\n');
            for (int i = 0; i < lines.Length; i++)
            {
                string line = lines[i];
                foreach (Match m in NamespaceUse().Matches(line))
                {
                    if (forbidden.Contains(m.Groups[1].Value) || forbidden.Contains(m.Groups[1].Value.Split('.')[0]))
                    {
                        failures.Add($"{path}:{i + 1}: Herald.Broker.{m.Groups[1].Value}");
                    }
                }

                foreach (Match m in Identifier().Matches(line))
                {
                    string name = m.Value;
                    bool call = CallAfter().IsMatch(line.AsSpan(m.Index + m.Length)) && !NewBefore().IsMatch(line.AsSpan(0, m.Index));
                    if (!call && types.Contains(name) && declaredIn[name].All(forbidden.Contains))
                    {
                        failures.Add($"{path}:{i + 1}: {name} (declared in {string.Join(", ", declaredIn[name].Order())})");
                    }
                }
            }
        }

        Assert.True(failures.Count == 0, "Source naming a room above its own:" + Environment.NewLine + string.Join(Environment.NewLine, failures));
    }

    /// <summary>The rooms (namespaces under Herald.Broker) a file of <paramref name="room"/> may not name.</summary>
    private static HashSet<string> Forbidden(string room)
    {
        string layer = room.Split('.')[0];
        var forbidden = Layers.TakeWhile(l => l != layer).ToHashSet(StringComparer.Ordinal);
        if (layer == "Transports" && room.Contains('.', StringComparison.Ordinal))
        {
            forbidden.UnionWith(Transports().Select(t => $"Transports.{t}").Where(t => t != room));
        }

        return forbidden;
    }

    private static readonly HashSet<string> Keywords = new(StringComparer.Ordinal)
    {
        "new", "return", "is", "as", "case", "throw", "await", "in", "out", "ref", "else", "yield", "not", "and", "or",
        "when", "nameof", "typeof", "sizeof", "default", "using", "static",
    };

    /// <summary>The code of a C# file with its comments and the contents of its string and char literals blanked (line breaks kept).</summary>
    internal static string WithoutCommentsAndStrings(string code)
    {
        var text = new StringBuilder(code.Length);
        int i = 0;
        while (i < code.Length)
        {
            int end;
            if (code.AsSpan(i).StartsWith("//"))
            {
                end = code.IndexOf('\n', i);
                end = end < 0 ? code.Length : end;
            }
            else if (code.AsSpan(i).StartsWith("/*"))
            {
                end = code.IndexOf("*/", i + 2, StringComparison.Ordinal);
                end = end < 0 ? code.Length : end + 2;
            }
            else if (RawStringStart().Match(code, i) is { Success: true } raw && raw.Index == i)
            {
                end = code.IndexOf("\"\"\"", i + raw.Length, StringComparison.Ordinal);
                end = end < 0 ? code.Length : end + 3;
            }
            else if (StringStart().Match(code, i) is { Success: true } quote && quote.Index == i)
            {
                bool verbatim = quote.Value.Contains('@', StringComparison.Ordinal);
                end = i + quote.Length;
                while (end < code.Length)
                {
                    if (verbatim && code.AsSpan(end).StartsWith("\"\""))
                    {
                        end += 2;
                    }
                    else if (!verbatim && code[end] == '\\')
                    {
                        end += 2;
                    }
                    else if (code[end++] == '"')
                    {
                        break;
                    }
                }
            }
            else if (CharLiteral().Match(code, i) is { Success: true } c && c.Index == i)
            {
                end = i + c.Length;
            }
            else
            {
                text.Append(code[i++]);
                continue;
            }

            end = Math.Min(end, code.Length);
            for (int k = i; k < end; k++)
            {
                text.Append(code[k] == '\n' ? '\n' : ' ');
            }

            i = end;
        }

        return text.ToString();
    }

    [GeneratedRegex(@"^\s*namespace\s+Herald\.Broker\.([\w.]+)", RegexOptions.Multiline)]
    private static partial Regex Namespace();

    [GeneratedRegex(@"\b(?:class|interface|enum|struct|record(?:\s+(?:class|struct))?)\s+([A-Z]\w*)|\bdelegate\s+[\w<>?,\s]+?\s([A-Z]\w*)\s*[<(]")]
    private static partial Regex TypeDeclaration();

    /// <summary>A name after a type or modifier and before what follows a declared member, parameter or local.</summary>
    [GeneratedRegex(@"(?<![.\w])([a-z]\w*|[\w>?\]])\s+([A-Z]\w*)(?=\s*(?:[=;,){(]|=>|$))", RegexOptions.Multiline)]
    private static partial Regex MemberDeclaration();

    [GeneratedRegex(@"\benum\s+\w+[^{;]*\{([^}]*)\}")]
    private static partial Regex EnumBody();

    [GeneratedRegex(@"^\s*(?:\[[^\]]*\]\s*)*([A-Z]\w*)")]
    private static partial Regex EnumValue();

    [GeneratedRegex(@"Herald\.Broker\.([\w.]+)")]
    private static partial Regex NamespaceUse();

    /// <summary>A name not after a dot (a member access names the member, not a type).</summary>
    [GeneratedRegex(@"(?<![.\w])[A-Z]\w*")]
    private static partial Regex Identifier();

    /// <summary>A call or a method declaration follows the name; a type is followed by "(" only after "new".</summary>
    [GeneratedRegex(@"^\s*\(")]
    private static partial Regex CallAfter();

    [GeneratedRegex(@"\bnew\s+$")]
    private static partial Regex NewBefore();

    [GeneratedRegex(@"\G[$@]*""""""")]
    private static partial Regex RawStringStart();

    [GeneratedRegex(@"\G(?:\$@|@\$|@|\$)?""")]
    private static partial Regex StringStart();

    [GeneratedRegex(@"\G'(?:\\.[^']*|[^\\'])'")]
    private static partial Regex CharLiteral();

    /// <summary>
    /// The cluster is a seam (broker/ARCHITECTURE.md, "Adding a capability"): sessions, transports, history and monitoring
    /// talk to the interfaces in Engines/, whose local implementations are the default. Only the composition root
    /// names the Redis implementations, so no code below it can ask whether there is a cluster.
    /// </summary>
    [Fact]
    public void Only_the_composition_root_uses_the_cluster()
    {
        TestResult result = Types.InAssembly(Broker).That()
            .DoNotResideInNamespace("Herald.Broker.Hosting").And().DoNotResideInNamespace("Herald.Broker.Cluster")
            .ShouldNot().HaveDependencyOn("Herald.Broker.Cluster").GetResult();

        Assert.True(result.IsSuccessful, $"Outside Hosting, these use Herald.Broker.Cluster: {string.Join(", ", result.FailingTypeNames ?? [])}");
    }

    /// <summary>No StackExchange.Redis type or exception leaves the room that implements the seams over Redis: a backplane failure reaches the rest as <c>ClusterUnavailableException</c>.</summary>
    [Fact]
    public void Only_the_cluster_uses_Redis()
    {
        TestResult result = Types.InAssembly(Broker).That().DoNotResideInNamespace("Herald.Broker.Cluster")
            .ShouldNot().HaveDependencyOn("StackExchange.Redis").GetResult();

        Assert.True(result.IsSuccessful, $"Outside Herald.Broker.Cluster, these use StackExchange.Redis: {string.Join(", ", result.FailingTypeNames ?? [])}");
    }

    /// <summary>Past about 600 lines a file holds two things (shared/STYLE.md): split it by aspect, as the router, the session and the cluster are.</summary>
    [Fact]
    public void No_broker_source_file_is_over_600_lines()
    {
        string source = Path.Combine(OperationsDeployTests.RepositoryRoot(), "broker", "src");
        string[] tooLong = Directory.EnumerateFiles(source, "*.cs", SearchOption.AllDirectories)
            .Where(path => !path.Contains($"{Path.DirectorySeparatorChar}obj{Path.DirectorySeparatorChar}", StringComparison.Ordinal))
            .Select(path => (Path: Path.GetRelativePath(source, path), Lines: File.ReadLines(path).Count()))
            .Where(file => file.Lines > 600)
            .Select(file => $"{file.Path} ({file.Lines})")
            .ToArray();

        Assert.True(tooLong.Length == 0, $"Over 600 lines: {string.Join(", ", tooLong)}");
    }
}
