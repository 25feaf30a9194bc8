using System.Collections.Concurrent;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>
/// The log lines of one test broker, as rendered, captured from the moment it is attached. The broker must
/// be started with the level the test reads (e.g. <c>--Logging:LogLevel:Herald=Warning</c>).
/// </summary>
public sealed class LogCapture : ILoggerProvider
{
    private readonly ConcurrentQueue<string> _lines = new();

    public static LogCapture Attach(TestBroker broker)
    {
        var capture = new LogCapture();
        broker.Services.GetRequiredService<ILoggerFactory>().AddProvider(capture);
        return capture;
    }

    public IReadOnlyList<string> Lines => [.. _lines];

    public ILogger CreateLogger(string categoryName) => new Logger(_lines);

    public void Dispose()
    {
    }

    private sealed class Logger(ConcurrentQueue<string> lines) : ILogger
    {
        public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;

        public bool IsEnabled(LogLevel logLevel) => true;

        public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter) =>
            lines.Enqueue($"{logLevel} {eventId.Id} {formatter(state, exception)}");
    }
}
