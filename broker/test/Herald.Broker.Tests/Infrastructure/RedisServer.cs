using System.Diagnostics;
using System.Net;
using System.Net.Sockets;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>
/// A real <c>redis-server</c> (Debian package <c>redis-server</c>, installed when missing) started as a child on a
/// free loopback port, without persistence. It can be killed and started again on the same port (a Redis
/// restart under the cluster). Disposing kills it.
/// </summary>
public sealed class RedisServer : IAsyncDisposable
{
    private Process? _process;
    private readonly List<string> _output = [];
    private readonly string[] _extra;
    private readonly string? _directory;

    private RedisServer(int port, string[] extra, string? directory)
    {
        Port = port;
        _extra = extra;
        _directory = directory;
    }

    public int Port { get; }

    /// <summary>What <c>Herald:Cluster:Redis</c> takes.</summary>
    public string Configuration => $"127.0.0.1:{Port}";

    /// <param name="extra">More <c>redis-server</c> arguments (<c>--cluster-enabled yes</c>...).</param>
    /// <param name="directory">Its working directory (where a cluster node keeps its nodes file); the current one when null.</param>
    public static async Task<RedisServer> StartAsync(string[]? extra = null, string? directory = null)
    {
        if (Herald.Testing.DebianPackages.Ensure("redis-server") is { } why) // redis-cli (the Redis Cluster tests) comes with it
        {
            throw new InvalidOperationException($"The cluster tests run against a real Redis: {why}.");
        }

        // Its ports are below the ephemeral range, kept free while it is killed and restarted; a Redis Cluster node's bus
        // port (by default its port + 10000, in the ephemeral range, where another lane's connection took one) is the next.
        extra ??= [];
        bool clustered = extra.Contains("--cluster-enabled");
        int port = Herald.Testing.TestPorts.Free(clustered ? 2 : 1);
        var server = new RedisServer(port, clustered ? [.. extra, "--cluster-port", (port + 1).ToString(System.Globalization.CultureInfo.InvariantCulture)] : extra, directory);
        await server.LaunchAsync();
        return server;
    }

    /// <summary>Starts it again on its port, after <see cref="Kill"/>.</summary>
    public Task RestartAsync() => LaunchAsync();

    private async Task LaunchAsync()
    {
        var start = new ProcessStartInfo("redis-server")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
            WorkingDirectory = _directory ?? Environment.CurrentDirectory,
        };
        string[] arguments = ["--port", Port.ToString(System.Globalization.CultureInfo.InvariantCulture), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no", .. _extra];
        foreach (string argument in arguments)
        {
            start.ArgumentList.Add(argument);
        }

        Process process;
        try
        {
            process = Process.Start(start) ?? throw new InvalidOperationException("redis-server did not start.");
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            throw new InvalidOperationException("redis-server is not installed (Debian package 'redis-server'; .ci/run installs it). The cluster tests run against a real Redis.", e);
        }

        process.OutputDataReceived += (_, e) => Keep(e.Data);
        process.ErrorDataReceived += (_, e) => Keep(e.Data);
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        _process = process;
        for (DateTime deadline = DateTime.UtcNow.AddSeconds(30); ; await Task.Delay(20))
        {
            if (process.HasExited)
            {
                throw new InvalidOperationException($"redis-server exited with {process.ExitCode}:\n{string.Join('\n', _output)}");
            }

            if (await AcceptsAsync())
            {
                return;
            }

            if (DateTime.UtcNow > deadline)
            {
                throw new TimeoutException($"redis-server did not listen on {Port} within 30 s:\n{string.Join('\n', _output)}");
            }
        }
    }

    private void Keep(string? line)
    {
        if (line is not null)
        {
            lock (_output)
            {
                _output.Add(line);
            }
        }
    }

    private async Task<bool> AcceptsAsync()
    {
        using var client = new TcpClient();
        try
        {
            await client.ConnectAsync(IPAddress.Loopback, Port);
            return true;
        }
        catch (SocketException)
        {
            return false;
        }
    }

    /// <summary>SIGSTOP: it stays connected and answers nothing (a stalled Redis), until <see cref="Resume"/>.</summary>
    public void Pause() => Signal("-STOP");

    /// <summary>SIGCONT after <see cref="Pause"/>.</summary>
    public void Resume() => Signal("-CONT");

    private void Signal(string signal)
    {
        using Process kill = Process.Start("kill", [signal, _process!.Id.ToString(System.Globalization.CultureInfo.InvariantCulture)])!;
        kill.WaitForExit();
    }

    /// <summary>SIGKILL, and waits for the exit: every connection to it is cut.</summary>
    public void Kill()
    {
        if (_process is { HasExited: false } process)
        {
            process.Kill();
            process.WaitForExit(10_000);
        }
    }

    public ValueTask DisposeAsync()
    {
        Kill();
        _process?.Dispose();
        return ValueTask.CompletedTask;
    }
}
