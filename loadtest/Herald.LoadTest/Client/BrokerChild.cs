using System.ComponentModel;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;

namespace Herald.LoadTest.Client;

/// <summary>
/// A broker started by the load tool as a child process (<c>dotnet Herald.Broker.dll --Herald:...</c>),
/// so a scenario can measure several broker configurations one after the other and read the broker's
/// CPU time from <see cref="Process"/>. Its output is drained as it comes (a full pipe would block it);
/// the last lines and every warning or error are kept for the report.
/// <para>
/// The child is killed (whole tree) by <see cref="DisposeAsync"/> (the scenario's <c>finally</c>, which
/// Ctrl+C reaches through its cancellation token), when the tool exits (<see cref="AppDomain.ProcessExit"/>),
/// and on SIGTERM or SIGHUP. Only a SIGKILL of the tool can leave it running; its PID is printed when it starts.
/// </para>
/// </summary>
internal sealed class BrokerChild : IAsyncDisposable
{
    private const int TailLines = 40;
    private const int MaxNotableLines = 50;
    private const string InlineCompletionsVariable = "DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS";

    private static readonly Lock LiveGate = new();
    private static readonly HashSet<BrokerChild> Live = [];
    private static PosixSignalRegistration[]? _signalRegistrations;

    private readonly Process _process;
    private readonly Lock _gate = new();
    private readonly Queue<string> _tail = new();
    private readonly List<string> _notable = [];
    private readonly EventHandler _onExit;
    private int _warnings;
    private int _errors;
    private int _killed;

    private BrokerChild(Process process, string commandLine)
    {
        _process = process;
        CommandLine = commandLine;
        _onExit = (_, _) => Kill();
        AppDomain.CurrentDomain.ProcessExit += _onExit;
        lock (LiveGate)
        {
            Live.Add(this);
            // SIGTERM and SIGHUP end a console app without raising ProcessExit: kill the children first,
            // then let the signal take its default course.
            _signalRegistrations ??= [
                PosixSignalRegistration.Create(PosixSignal.SIGTERM, _ => KillAll()),
                PosixSignalRegistration.Create(PosixSignal.SIGHUP, _ => KillAll()),
            ];
        }
    }

    public Process Process => _process;

    public int Id => _process.Id;

    /// <summary>The command that started it, for the report and for reproducing a run by hand.</summary>
    public string CommandLine { get; }

    public bool HasExited
    {
        get
        {
            try
            {
                return _process.HasExited;
            }
            catch (InvalidOperationException)
            {
                return true;
            }
        }
    }

    /// <summary>Warning lines the broker logged (lines with <c>WRN]</c>), less those expected from the configuration (HTTP off).</summary>
    public int Warnings => Volatile.Read(ref _warnings);

    /// <summary>Error and critical lines the broker logged (<c>ERR]</c>, <c>FTL]</c>, <c>CRT]</c>), and unhandled exceptions.</summary>
    public int Errors => Volatile.Read(ref _errors);

    public IReadOnlyList<string> Tail
    {
        get
        {
            lock (_gate)
            {
                return [.. _tail];
            }
        }
    }

    /// <summary>The first warnings and errors, as logged.</summary>
    public IReadOnlyList<string> Notable
    {
        get
        {
            lock (_gate)
            {
                return [.. _notable];
            }
        }
    }

    /// <summary>The dotnet host to run a framework-dependent DLL with: the one running this tool when it is <c>dotnet</c>, else <c>DOTNET_HOST_PATH</c>, else <c>dotnet</c> on the PATH.</summary>
    public static string DotnetHost()
    {
        string? self = Environment.ProcessPath;
        if (self is not null && Path.GetFileNameWithoutExtension(self).Equals("dotnet", StringComparison.OrdinalIgnoreCase))
        {
            return self;
        }

        return Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") is { Length: > 0 } host ? host : "dotnet";
    }

    /// <summary>
    /// Starts <c>dotnet <paramref name="dll"/> <paramref name="arguments"/></c>. The child does not inherit
    /// <c>DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS</c>, which this tool sets for itself: the broker runs
    /// as it would from a shell.
    /// </summary>
    /// <param name="cpus">Pin the child to these CPUs (<c>taskset -c</c>), or null.</param>
    /// <exception cref="Win32Exception">The dotnet host could not be started.</exception>
    public static BrokerChild Start(string dll, IReadOnlyList<string> arguments, string? cpus = null) =>
        StartExecutable(DotnetHost(), [Path.GetFullPath(dll), .. arguments], cpus, Path.GetDirectoryName(Path.GetFullPath(dll)), $"dotnet {dll} {string.Join(' ', arguments)}");

    /// <summary>
    /// Starts any server (<c>nats-server</c>, <c>redis-server</c>, this tool's SignalR host) as a child,
    /// pinned to <paramref name="cpus"/> with <c>taskset -c</c> when given (taskset execs the server, so the
    /// PID is the server's own).
    /// </summary>
    /// <exception cref="Win32Exception">The executable (or taskset) could not be started: not installed.</exception>
    public static BrokerChild StartExecutable(string fileName, IReadOnlyList<string> arguments, string? cpus = null, string? workingDirectory = null, string? display = null)
    {
        var start = new ProcessStartInfo(cpus is null ? fileName : "taskset")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = false,
            UseShellExecute = false,
            WorkingDirectory = workingDirectory ?? Environment.CurrentDirectory,
        };
        if (cpus is not null)
        {
            start.ArgumentList.Add("-c");
            start.ArgumentList.Add(cpus);
            start.ArgumentList.Add(fileName);
        }

        foreach (string argument in arguments)
        {
            start.ArgumentList.Add(argument);
        }

        start.Environment.Remove(InlineCompletionsVariable);
        string commandLine = (cpus is null ? "" : $"taskset -c {cpus} ") + (display ?? $"{fileName} {string.Join(' ', arguments)}");
        var process = new Process { StartInfo = start, EnableRaisingEvents = true };
        var child = new BrokerChild(process, commandLine);
        process.OutputDataReceived += (_, e) => child.OnLine(e.Data);
        process.ErrorDataReceived += (_, e) => child.OnLine(e.Data);
        try
        {
            process.Start();
        }
        catch
        {
            AppDomain.CurrentDomain.ProcessExit -= child._onExit;
            lock (LiveGate)
            {
                Live.Remove(child);
            }

            process.Dispose();
            throw;
        }

        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        return child;
    }

    /// <summary>Waits until something accepts TCP connections on <paramref name="endPoint"/>; null when it does, else why not.</summary>
    public async Task<string?> WaitUntilListeningAsync(IPEndPoint endPoint, TimeSpan timeout, CancellationToken cancellationToken)
    {
        long start = Stopwatch.GetTimestamp();
        while (Stopwatch.GetElapsedTime(start) < timeout)
        {
            if (HasExited)
            {
                return $"the server exited with code {ExitCode()} before accepting connections: {string.Join(" | ", Tail.TakeLast(5))}";
            }

            if (await IsListeningAsync(endPoint, cancellationToken))
            {
                return null;
            }

            await Task.Delay(50, cancellationToken);
        }

        return $"the server did not accept connections on port {endPoint.Port} within {timeout.TotalSeconds:F0} s";
    }

    /// <summary>True when something accepts TCP connections on <paramref name="endPoint"/> (before starting a broker there: it must be free).</summary>
    public static async Task<bool> IsListeningAsync(IPEndPoint endPoint, CancellationToken cancellationToken)
    {
        using var socket = new Socket(endPoint.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        timeout.CancelAfter(TimeSpan.FromSeconds(1));
        try
        {
            await socket.ConnectAsync(endPoint, timeout.Token);
            return true;
        }
        catch (SocketException)
        {
            return false;
        }
        catch (OperationCanceledException) when (!cancellationToken.IsCancellationRequested)
        {
            return true; // not refused: something is there but not answering
        }
    }

    /// <summary>
    /// Waits until the broker completes a HELLO/WELCOME handshake on <paramref name="endPoint"/>.
    /// Returns null when it does, else why not (it exited, or <paramref name="timeout"/> passed). The probe
    /// presents <paramref name="auth"/> in HELLO: a broker with authentication on refuses a probe without it;
    /// with <paramref name="via"/> speaking TLS or WebSocket it handshakes those first.
    /// </summary>
    public async Task<string?> WaitUntilReadyAsync(IPEndPoint endPoint, TimeSpan timeout, CancellationToken cancellationToken, string? auth = null, BrokerEndpoints? via = null)
    {
        long start = Stopwatch.GetTimestamp();
        string last = "no attempt yet";
        while (Stopwatch.GetElapsedTime(start) < timeout)
        {
            if (HasExited)
            {
                return $"the broker exited with code {ExitCode()} before accepting connections: {string.Join(" | ", Tail.TakeLast(5))}";
            }

            using var attempt = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            attempt.CancelAfter(TimeSpan.FromSeconds(2));
            try
            {
                HeraldConnection probe = await HeraldConnection.ConnectAsync(endPoint, "loadtest-readiness-probe", attempt.Token, via: via, auth: auth);
                await probe.DisposeAsync();
                return null;
            }
            catch (Exception e) when (e is SocketException or IOException or BrokerErrorException or Herald.Protocol.ProtocolException or System.Security.Authentication.AuthenticationException
                                          || (e is OperationCanceledException && !cancellationToken.IsCancellationRequested))
            {
                last = e.Message;
            }

            await Task.Delay(100, cancellationToken);
        }

        return $"the broker did not complete a handshake on port {endPoint.Port} within {timeout.TotalSeconds:F0} s (last attempt: {last})";
    }

    /// <summary>Kills every child still running (on a terminating signal).</summary>
    private static void KillAll()
    {
        BrokerChild[] live;
        lock (LiveGate)
        {
            live = [.. Live];
        }

        foreach (BrokerChild child in live)
        {
            child.Kill();
        }
    }

    /// <summary>Kills the broker and everything it started; idempotent.</summary>
    public void Kill()
    {
        if (Interlocked.Exchange(ref _killed, 1) != 0)
        {
            return;
        }

        try
        {
            if (!_process.HasExited)
            {
                _process.Kill(entireProcessTree: true);
            }
        }
        catch (Exception e) when (e is InvalidOperationException or Win32Exception or NotSupportedException)
        {
            // already gone
        }
    }

    public async ValueTask DisposeAsync()
    {
        Kill();
        try
        {
            using var wait = new CancellationTokenSource(TimeSpan.FromSeconds(10));
            await _process.WaitForExitAsync(wait.Token);
        }
        catch (Exception e) when (e is OperationCanceledException or InvalidOperationException)
        {
            Console.Error.WriteLine($"warning: broker child {SafeId()} did not exit within 10 s of being killed.");
        }

        AppDomain.CurrentDomain.ProcessExit -= _onExit;
        lock (LiveGate)
        {
            Live.Remove(this);
        }

        _process.Dispose();
    }

    private string ExitCode()
    {
        try
        {
            return _process.ExitCode.ToString(System.Globalization.CultureInfo.InvariantCulture);
        }
        catch (InvalidOperationException)
        {
            return "?";
        }
    }

    private string SafeId()
    {
        try
        {
            return _process.Id.ToString(System.Globalization.CultureInfo.InvariantCulture);
        }
        catch (InvalidOperationException)
        {
            return "?";
        }
    }

    private void OnLine(string? line)
    {
        if (line is null)
        {
            return;
        }

        bool warning = line.Contains(" WRN]", StringComparison.Ordinal) && !line.Contains("HTTP is off", StringComparison.Ordinal);
        bool error = line.Contains(" ERR]", StringComparison.Ordinal) || line.Contains(" FTL]", StringComparison.Ordinal)
            || line.Contains(" CRT]", StringComparison.Ordinal) || line.StartsWith("Unhandled exception", StringComparison.Ordinal);
        lock (_gate)
        {
            _tail.Enqueue(line);
            if (_tail.Count > TailLines)
            {
                _tail.Dequeue();
            }

            if (warning || error)
            {
                if (warning)
                {
                    _warnings++;
                }
                else
                {
                    _errors++;
                }

                if (_notable.Count < MaxNotableLines)
                {
                    _notable.Add(line);
                }
            }
        }
    }
}
