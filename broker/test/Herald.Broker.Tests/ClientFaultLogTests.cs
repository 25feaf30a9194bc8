using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text.RegularExpressions;
using Herald.Broker.Tests.Infrastructure;

namespace Herald.Broker.Tests;

/// <summary>
/// Per-client faults are rate-limited at the logging source (issue 13 point 7: 2,875 warnings for 2,500 torn
/// connections): a bounded number of lines per interval, the rest summed up by kind, the metrics exact.
/// </summary>
public sealed partial class ClientFaultLogTests
{
    private const int TruncatedFrameEvent = 2005;
    private const int SummaryEvent = 2009;
    private static readonly TimeSpan Hang = TimeSpan.FromSeconds(60);

    [Fact]
    public async Task Torn_connections_beyond_the_limit_are_one_summary_line_with_their_count_and_metrics_count_them_all()
    {
        const int Torn = 200;
        const int Limit = 5;
        var broker = await TestBroker.StartAsync(
            o =>
            {
                o.Logging.ClientFaultsPerInterval = Limit;
                o.Logging.ClientFaultInterval = TimeSpan.FromHours(1); // one interval: its summary is written when the broker stops
            },
            ["--Logging:LogLevel:Herald=Warning"]);
        LogCapture log = LogCapture.Attach(broker);
        await using (broker)
        {
            using MetricsProbe metrics = broker.Metrics();
            await TearAsync(broker.Port, Torn);
            await Until.True(() => metrics["herald.protocol.errors", "error.type", "TruncatedFrame"] == Torn, "every torn frame is counted", Hang); // metrics count every one
            await Until.True(() => Lines(log, TruncatedFrameEvent).Count == Limit, "the limit's worth of lines", Hang); // while the attack lasts: the limit, not one line each
            Assert.Empty(Lines(log, SummaryEvent));
        }

        string summary = Assert.Single(Lines(log, SummaryEvent));
        Assert.Equal(Torn - Limit, SuppressedCount(summary));
        Assert.Contains($"TruncatedFrame {Torn - Limit}", summary, StringComparison.Ordinal);
        Assert.Equal(Limit, Lines(log, TruncatedFrameEvent).Count);
    }

    [Fact]
    public async Task When_an_interval_ends_its_summary_is_written_and_the_next_faults_are_logged_again()
    {
        const int Limit = 3;
        await using var broker = await TestBroker.StartAsync(
            o =>
            {
                o.Logging.ClientFaultsPerInterval = Limit;
                o.Logging.ClientFaultInterval = TimeSpan.FromMilliseconds(200);
            },
            ["--Logging:LogLevel:Herald=Warning"]);
        LogCapture log = LogCapture.Attach(broker);

        // Every fault is accounted for, written or summed up, once the intervals that held them have ended.
        await TearAsync(broker.Port, 20);
        await Until.True(() => Lines(log, TruncatedFrameEvent).Count + Lines(log, SummaryEvent).Sum(SuppressedCount) == 20, "every fault logged or summed in a summary", Hang);
        Assert.NotEmpty(Lines(log, SummaryEvent));

        // A later fault, in a new interval, is logged as itself.
        int before = Lines(log, TruncatedFrameEvent).Count;
        await TearAsync(broker.Port, 1);
        await Until.True(() => Lines(log, TruncatedFrameEvent).Count == before + 1, "one more line", Hang);
    }

    /// <summary><paramref name="count"/> connections that close in the middle of a frame (TruncatedFrame, event 2005), ten at a time.</summary>
    private static async Task TearAsync(int port, int count)
    {
        byte[] partial = [0, 0, 0, 100, 0x91, 0x01]; // a 100-byte frame of which two bytes arrive
        using var slots = new SemaphoreSlim(10);
        await Task.WhenAll(Enumerable.Range(0, count).Select(async _ =>
        {
            await slots.WaitAsync();
            try
            {
                using var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
                await socket.ConnectAsync(new IPEndPoint(IPAddress.Loopback, port));
                await socket.SendAsync(partial);
                socket.Shutdown(SocketShutdown.Send);
                var buffer = new byte[64];
                try
                {
                    while (await socket.ReceiveAsync(buffer) > 0)
                    {
                        // until the broker closes its side: it has read the torn frame by then
                    }
                }
                catch (SocketException)
                {
                    // reset instead of closed: the same
                }
            }
            finally
            {
                slots.Release();
            }
        }));
    }

    private static List<string> Lines(LogCapture log, int eventId) =>
        [.. log.Lines.Where(l => l.StartsWith($"Warning {eventId.ToString(CultureInfo.InvariantCulture)} ", StringComparison.Ordinal))];

    private static long SuppressedCount(string summary) => long.Parse(Count().Match(summary).Groups[1].Value, CultureInfo.InvariantCulture);

    [GeneratedRegex(@"^Warning 2009 (\d+) more client faults")]
    private static partial Regex Count();
}
