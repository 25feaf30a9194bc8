using System.Globalization;
using System.Text;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Telemetry;

/// <summary>
/// The broker's logger, with its per-client fault lines rate-limited so that logs stay readable under attack
/// (without it, every torn connection would be a warning of its own). In each interval the first <c>limit</c> faults
/// (<see cref="BrokerLog.IsClientFault"/>: protocol errors, torn frames, closes for timeouts and slow
/// consumers, drain timeouts, failed authentications) are written as they come; the rest are counted by event
/// and code and written as one summary line (event 2009) when the interval ends, or when the broker stops.
/// Metrics still count every fault; every other event passes through untouched.
/// </summary>
/// <remarks>
/// Thread-safe. A fault is a connection's or a session's end or refusal, never per message: the short lock
/// here is off the hot path, and nothing is written while it is held. An event whose level is off costs nothing.
/// </remarks>
internal sealed class ClientFaultLog : ILogger, IDisposable
{
    private readonly ILogger _inner;
    private readonly int _limit;
    private readonly TimeSpan _interval;
    private readonly TimeProvider _time;
    private readonly Lock _gate = new();

    // Guarded by _gate: the current interval (open while _timer is set), what it wrote and what it kept back.
    private readonly SortedDictionary<string, long> _suppressed = new(StringComparer.Ordinal);
    private ITimer? _timer;
    private int _written;
    private long _suppressedTotal;
    private bool _disposed;

    public ClientFaultLog(ILogger inner, int limit, TimeSpan interval, TimeProvider time)
    {
        _inner = inner;
        _limit = limit;
        _interval = interval;
        _time = time;
    }

    public IDisposable? BeginScope<TState>(TState state) where TState : notnull => _inner.BeginScope(state);

    public bool IsEnabled(LogLevel logLevel) => _inner.IsEnabled(logLevel);

    public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
    {
        if (!BrokerLog.IsClientFault(eventId.Id) || !_inner.IsEnabled(logLevel) || Admit(eventId, state))
        {
            _inner.Log(logLevel, eventId, state, exception, formatter);
        }
    }

    /// <summary>At shutdown: the summary of the open interval, so no count is lost; then faults pass through.</summary>
    public void Dispose() => EndInterval(last: true);

    /// <summary>Whether this fault is written; if not, it is counted for the interval's summary.</summary>
    private bool Admit<TState>(EventId eventId, TState state)
    {
        lock (_gate)
        {
            if (_disposed)
            {
                return true;
            }

            _timer ??= _time.CreateTimer(_ => EndInterval(), null, _interval, Timeout.InfiniteTimeSpan); // the first fault opens an interval
            if (_written < _limit)
            {
                _written++;
                return true;
            }

            string kind = Code(state) is { } code ? $"{eventId.Name} {code}" : eventId.Name ?? eventId.Id.ToString(CultureInfo.InvariantCulture);
            _suppressed[kind] = _suppressed.GetValueOrDefault(kind) + 1;
            _suppressedTotal++;
            return false;
        }
    }

    /// <summary>The interval is over (or the broker stops): the summary of what it kept back, if anything; the next fault opens another.</summary>
    private void EndInterval(bool last = false)
    {
        long total;
        string byKind;
        lock (_gate)
        {
            if (_disposed)
            {
                return;
            }

            _disposed = last;
            _timer?.Dispose();
            _timer = null;
            _written = 0;
            total = _suppressedTotal;
            if (total == 0)
            {
                return;
            }

            var summary = new StringBuilder();
            foreach ((string kind, long count) in _suppressed)
            {
                summary.Append(summary.Length == 0 ? "" : ", ").Append(kind).Append(' ').Append(count.ToString(CultureInfo.InvariantCulture));
            }

            byKind = summary.ToString();
            _suppressed.Clear();
            _suppressedTotal = 0;
        }

        _inner.ClientFaultsSuppressed(total, _interval, _limit, byKind);
    }

    /// <summary>The <c>Code</c> value of a <see cref="BrokerLog"/> event (its error code), if it has one.</summary>
    private static string? Code<TState>(TState state)
    {
        if (state is IReadOnlyList<KeyValuePair<string, object?>> values)
        {
            foreach (KeyValuePair<string, object?> value in values)
            {
                if (value.Key == "Code")
                {
                    return value.Value?.ToString();
                }
            }
        }

        return null;
    }
}
