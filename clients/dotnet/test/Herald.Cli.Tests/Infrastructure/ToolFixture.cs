using System.Diagnostics;
using System.Reflection;
using System.Text.RegularExpressions;

namespace Herald.Cli.Tests.Infrastructure;

/// <summary>
/// The real packed tool, once per test run: <c>dotnet pack</c> of the build the test project was built with
/// (<c>--no-build</c>: the project reference builds it first), then <c>dotnet tool install Herald.Cli
/// --tool-path</c> from that folder alone (a nuget.config that clears every other source, and a packages folder of
/// its own, so nothing is fetched and no stale copy of the same version is taken from the user's cache).
/// </summary>
public sealed partial class ToolFixture : IAsyncLifetime
{
    private readonly string _root = Directory.CreateTempSubdirectory("herald-cli-tests-").FullName;

    /// <summary>The installed <c>herald</c> executable (the tool's app host).</summary>
    public string Executable { get; private set; } = null!;

    public async Task InitializeAsync()
    {
        string project = Metadata("HeraldCliProject");
        string packages = Path.Combine(_root, "packages");
        await DotnetAsync(["pack", project, "--no-build", "-c", Metadata("Configuration"), "-o", packages], environment: null);
        string package = Path.GetFileName(Directory.GetFiles(packages, "Herald.Cli.*.nupkg").Single());
        string version = PackageVersion().Match(package).Groups[1].Value;

        string config = Path.Combine(_root, "nuget.config");
        await File.WriteAllTextAsync(config, $"""
            <?xml version="1.0" encoding="utf-8"?>
            <configuration>
              <packageSources>
                <clear />
                <add key="herald-cli-tests" value="{packages}" />
              </packageSources>
            </configuration>
            """);
        string tools = Path.Combine(_root, "tools");
        await DotnetAsync(
            ["tool", "install", "Herald.Cli", "--version", version, "--tool-path", tools, "--configfile", config],
            new Dictionary<string, string> { ["NUGET_PACKAGES"] = Path.Combine(_root, "nuget-packages") });
        Executable = Path.Combine(tools, OperatingSystem.IsWindows() ? "herald.exe" : "herald");
        Assert.True(File.Exists(Executable), $"dotnet tool install left no {Executable}");
    }

    public Task DisposeAsync()
    {
        Directory.Delete(_root, recursive: true);
        return Task.CompletedTask;
    }

    /// <summary>A fresh empty folder under this run's temporary root.</summary>
    public string NewFolder() => Directory.CreateDirectory(Path.Combine(_root, "t-" + Guid.NewGuid().ToString("N"))).FullName;

    private static string Metadata(string key) =>
        typeof(ToolFixture).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == key).Value!;

    private static async Task DotnetAsync(string[] arguments, Dictionary<string, string>? environment)
    {
        var start = new ProcessStartInfo("dotnet") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (string argument in arguments)
        {
            start.ArgumentList.Add(argument);
        }

        start.Environment["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1";
        start.Environment["DOTNET_NOLOGO"] = "1";
        foreach ((string key, string value) in environment ?? [])
        {
            start.Environment[key] = value;
        }

        using Process process = Process.Start(start)!;
        Task<string> output = process.StandardOutput.ReadToEndAsync();
        Task<string> error = process.StandardError.ReadToEndAsync();
        await process.WaitForExitAsync().WaitAsync(TimeSpan.FromMinutes(5));
        Assert.True(process.ExitCode == 0, $"dotnet {string.Join(' ', arguments)} exited {process.ExitCode}:\n{await output}\n{await error}");
    }

    [GeneratedRegex(@"^Herald\.Cli\.(.+)\.nupkg$")]
    private static partial Regex PackageVersion();
}

/// <summary>Every test class runs the one packed tool; they run one after another (each starts a few processes).</summary>
[CollectionDefinition(Name)]
public sealed class ToolCollection : ICollectionFixture<ToolFixture>
{
    public const string Name = "herald tool";
}
