using System.Diagnostics;
using System.Text;
using System.Threading.Channels;

namespace Herald.Cli.Tests.Infrastructure;

/// <summary>
/// One <c>herald</c> process: its stdout and stderr read as they come (lines, and stdout's bytes), so a test
/// waits for a line (the "Subscribed to ..." notice) rather than sleeping. Killed on dispose if still running.
/// </summary>
public sealed class HeraldRun : IAsyncDisposable
{
    /// <summary>The hang guard: a process that would keep a test waiting fails it instead. Never a timing assertion.</summary>
    public static readonly TimeSpan Limit = TimeSpan.FromSeconds(30);

    private readonly Process _process;
    private readonly Channel<string> _errorLines = Channel.CreateUnbounded<string>();
    private readonly StringBuilder _error = new();
    private readonly MemoryStream _output = new();
    private readonly Task _reading;

    private HeraldRun(Process process)
    {
        _process = process;
        _reading = Task.WhenAll(ReadOutputAsync(), ReadErrorAsync());
    }

    /// <summary>
    /// Starts <paramref name="executable"/> with <paramref name="arguments"/>, in an environment without any
    /// HERALD_ variable of the test run's own, with <c>XDG_CONFIG_HOME</c> = <paramref name="configHome"/>, plus
    /// <paramref name="environment"/>; stdin is <paramref name="stdin"/> then closed.
    /// </summary>
    public static HeraldRun Start(string executable, string configHome, IEnumerable<string> arguments, IReadOnlyDictionary<string, string>? environment = null, byte[]? stdin = null)
    {
        var start = new ProcessStartInfo(executable)
        {
            RedirectStandardInput = true,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        foreach (string argument in arguments)
        {
            start.ArgumentList.Add(argument);
        }

        foreach (string key in start.Environment.Keys.Where(k => k.StartsWith("HERALD_", StringComparison.Ordinal)).ToList())
        {
            start.Environment.Remove(key);
        }

        start.Environment["XDG_CONFIG_HOME"] = configHome;
        start.Environment["DOTNET_ROOT"] = Path.GetDirectoryName(Environment.ProcessPath) is { } dir && File.Exists(Path.Combine(dir, OperatingSystem.IsWindows() ? "dotnet.exe" : "dotnet"))
            ? dir
            : Environment.GetEnvironmentVariable("DOTNET_ROOT") ?? "";
        foreach ((string key, string value) in environment ?? new Dictionary<string, string>())
        {
            start.Environment[key] = value;
        }

        Process process = Process.Start(start)!;
        if (stdin is not null)
        {
            process.StandardInput.BaseStream.Write(stdin);
        }

        process.StandardInput.Close();
        return new HeraldRun(process);
    }

    public int ExitCode => _process.ExitCode;

    /// <summary>Everything written to stdout so far (all of it once <see cref="WaitForExitAsync"/> returned).</summary>
    public byte[] OutputBytes
    {
        get
        {
            lock (_output)
            {
                return _output.ToArray();
            }
        }
    }

    public string Output => Encoding.UTF8.GetString(OutputBytes);

    public string Error
    {
        get
        {
            lock (_error)
            {
                return _error.ToString();
            }
        }
    }

    /// <summary>Waits for a stderr line that contains <paramref name="text"/>; fails if the process ends first.</summary>
    public async Task<string> WaitForErrorLineAsync(string text)
    {
        using var deadline = new CancellationTokenSource(Limit);
        try
        {
            await foreach (string line in _errorLines.Reader.ReadAllAsync(deadline.Token))
            {
                if (line.Contains(text, StringComparison.Ordinal))
                {
                    return line;
                }
            }
        }
        catch (OperationCanceledException)
        {
            // reported below
        }

        Assert.Fail($"herald never printed '{text}' on stderr; stderr so far:\n{Error}\nstdout:\n{Output}");
        return "";
    }

    /// <summary>Waits for the process to end (and for its output to be read) and returns its exit code.</summary>
    public async Task<int> WaitForExitAsync()
    {
        try
        {
            await _process.WaitForExitAsync().WaitAsync(Limit);
            await _reading.WaitAsync(Limit);
        }
        catch (TimeoutException)
        {
            Assert.Fail($"herald did not exit; stderr:\n{Error}\nstdout:\n{Output}");
        }

        return _process.ExitCode;
    }

    public async ValueTask DisposeAsync()
    {
        if (!_process.HasExited)
        {
            _process.Kill(entireProcessTree: true);
            await _process.WaitForExitAsync();
        }

        await _reading;
        _process.Dispose();
    }

    private async Task ReadOutputAsync()
    {
        var buffer = new byte[4096];
        int read;
        while ((read = await _process.StandardOutput.BaseStream.ReadAsync(buffer)) > 0)
        {
            lock (_output)
            {
                _output.Write(buffer, 0, read);
            }
        }
    }

    private async Task ReadErrorAsync()
    {
        while (await _process.StandardError.ReadLineAsync() is { } line)
        {
            lock (_error)
            {
                _error.Append(line).Append('\n');
            }

            _errorLines.Writer.TryWrite(line);
        }

        _errorLines.Writer.TryComplete();
    }
}
