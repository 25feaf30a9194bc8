using Herald.LoadTest.Reporting;
using Herald.Protocol;

namespace Herald.LoadTest.Client;

/// <summary>
/// What a connection's read loop (<see cref="HeraldConnection.ReadUntilClosedAsync"/>) learns besides the
/// messages: the broker's ERROR frames, frames nobody expected, and why the connection ended. Each goes to
/// the run's log; a fatal ERROR or an end the scenario did not cause (<paramref name="closing"/> false)
/// becomes <see cref="Failure"/>, the first one kept.
/// <para>Threading: written by the reading task (and <see cref="Fail"/> by a sending one); read by anyone.</para>
/// </summary>
internal sealed class ConnectionHealth(string name, RunLog log, Func<bool> closing)
{
    private string? _failure;
    private long _errorFrames;
    private long _unexpectedFrames;
    private volatile bool _ended;

    /// <summary>Why the connection failed; null while it is well (or was closed by the scenario).</summary>
    public string? Failure => Volatile.Read(ref _failure);

    public long ErrorFrames => Interlocked.Read(ref _errorFrames);

    public long UnexpectedFrames => Interlocked.Read(ref _unexpectedFrames);

    /// <summary>The read loop has returned.</summary>
    public bool Ended => _ended;

    /// <summary>Records a failure found outside the read loop (a send that failed), unless one is known already.</summary>
    public void Fail(string why) => Interlocked.CompareExchange(ref _failure, why, null);

    internal void OnError(ErrorFrame error)
    {
        Interlocked.Increment(ref _errorFrames);
        string description = BrokerErrorException.Describe(error);
        log.Report(name, description);
        if (error.Fatal)
        {
            Fail(description);
        }
    }

    internal void OnUnexpected(FrameType type)
    {
        Interlocked.Increment(ref _unexpectedFrames);
        log.Report(name, $"unexpected {type} frame");
    }

    internal void OnEnd(string why)
    {
        if (!closing())
        {
            Fail(why);
            log.Report(name, $"disconnected: {why}");
        }

        _ended = true;
    }
}
