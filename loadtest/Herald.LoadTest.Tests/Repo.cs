using System.Net;
using System.Net.Sockets;
using System.Reflection;
using System.Text.Json;

[assembly: CollectionBehavior(DisableTestParallelization = true)] // each test runs a broker and a load; one at a time

namespace Herald.LoadTest.Tests;

/// <summary>Where things are for the end-to-end scenario tests: the broker build, free ports, a results folder.</summary>
internal static class Repo
{
    public static string Root { get; } = FindRoot();

    /// <summary>The broker built in the same configuration as these tests (the project reference builds it first).</summary>
    public static string BrokerDll
    {
        get
        {
            string configuration = typeof(Repo).Assembly.GetCustomAttribute<AssemblyConfigurationAttribute>()?.Configuration ?? "Debug";
            return Path.Combine(Root, "broker", "src", "Herald.Broker", "bin", configuration, "net10.0", "Herald.Broker.dll");
        }
    }

    /// <summary>
    /// <paramref name="count"/> consecutive TCP ports nobody listens on now (probed by binding each), for a
    /// broker the test starts. Starts from a random point in 20000-29999, away from the ephemeral range.
    /// </summary>
    public static int FreePorts(int count)
    {
        // A port free when probed is bound later by the servers a run starts: one handed out is never handed out again
        // while it is among the last 5,000, so two tests starting at once are never given overlapping ports.
        lock (Handed)
        {
            for (int attempt = 0; attempt < 400; attempt++)
            {
                int first = Random.Shared.Next(20000, 30000 - count);
                if (Enumerable.Range(first, count).All(port => !Handed.Contains(port) && IsFree(port)))
                {
                    foreach (int port in Enumerable.Range(first, count))
                    {
                        Handed.Add(port);
                        HandedOrder.Enqueue(port);
                    }

                    while (Handed.Count > 5000)
                    {
                        Handed.Remove(HandedOrder.Dequeue());
                    }

                    return first;
                }
            }
        }

        throw new InvalidOperationException($"No {count} consecutive free ports found.");
    }

    private static readonly HashSet<int> Handed = [];
    private static readonly Queue<int> HandedOrder = new();

    /// <summary>
    /// Makes sure nats-server and redis-server (Debian packages) are on the PATH, installing what is missing
    /// once per test run (<see cref="Herald.Testing.DebianPackages"/>). Returns why not, or null when both are there.
    /// </summary>
    public static string? EnsurePeerServers() => Herald.Testing.DebianPackages.Ensure("nats-server", "redis-server");

    /// <summary>True while a process with this id runs (a server a test started, before or after it was disposed).</summary>
    public static bool IsRunning(int pid)
    {
        try
        {
            using var process = System.Diagnostics.Process.GetProcessById(pid);
            return !process.HasExited;
        }
        catch (ArgumentException)
        {
            return false;
        }
    }

    /// <summary>A fresh file path for a scenario's <c>--out</c>.</summary>
    public static string OutFile(string name) => Path.Combine(Path.GetTempPath(), $"herald-loadtest-{name}-{Guid.NewGuid():N}.json");

    /// <summary>Runs a scenario in-process, as <c>herald-loadtest name args</c> would, and returns its exit code.</summary>
    public static Task<int> RunAsync(string scenario, params string[] args) => Program.RunAsync([scenario, .. args], CancellationToken.None);

    /// <summary>The target options a scenario's command line reads to (<c>fanout</c>'s: every target option, and the window's).</summary>
    internal static Herald.LoadTest.Targets.TargetOptions TargetOptionsOf(string[] args) => Program.ReadSettings(["fanout", .. args]).Target!;

    public static JsonElement ReadJson(string path)
    {
        using JsonDocument document = JsonDocument.Parse(File.ReadAllText(path));
        return document.RootElement.Clone();
    }

    private static bool IsFree(int port)
    {
        try
        {
            using var listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            listener.Bind(new IPEndPoint(IPAddress.Loopback, port));
            return true;
        }
        catch (SocketException)
        {
            return false;
        }
    }

    private static string FindRoot()
    {
        for (DirectoryInfo? d = new(AppContext.BaseDirectory); d is not null; d = d.Parent)
        {
            if (File.Exists(Path.Combine(d.FullName, "broker.sln")))
            {
                return d.FullName;
            }
        }

        throw new InvalidOperationException("broker.sln not found above " + AppContext.BaseDirectory);
    }
}
