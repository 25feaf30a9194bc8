using System.Diagnostics;
using System.Globalization;

namespace Herald.LoadTest.Reporting;

/// <summary>
/// Events worth a line during a run (ERROR frames, disconnections), printed to stderr as they happen
/// with the time since the run started. Bounded: after <see cref="MaxLines"/> lines only the count grows,
/// so a broker that sends a million <c>MessagesDropped</c> cannot flood the terminal.
/// Thread-safe: any connection's task may call <see cref="Report"/>.
/// </summary>
internal sealed class RunLog
{
    public const int MaxLines = 50;

    private readonly long _start = Stopwatch.GetTimestamp();
    private readonly Lock _gate = new();
    private readonly List<string> _lines = [];
    private int _count;

    /// <summary>Events reported so far, printed or not.</summary>
    public int Count => Volatile.Read(ref _count);

    /// <summary>The first <see cref="MaxLines"/> events, for the result file.</summary>
    public IReadOnlyList<string> Lines
    {
        get
        {
            lock (_gate)
            {
                return [.. _lines];
            }
        }
    }

    public void Report(string who, string what)
    {
        string line = string.Create(CultureInfo.InvariantCulture, $"[{Stopwatch.GetElapsedTime(_start).TotalSeconds,7:F3}s] {who}: {what}");
        lock (_gate)
        {
            _count++;
            if (_count <= MaxLines)
            {
                _lines.Add(line);
                Console.Error.WriteLine(line);
            }
            else if (_count == MaxLines + 1)
            {
                Console.Error.WriteLine($"(more events follow; only their count is kept)");
            }
        }
    }
}
