using System.Diagnostics;
using System.Globalization;
using System.Net.WebSockets;
using System.Text.Json;
using Herald.Broker.Sessions;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// WebSocket subscribers that stop reading while a publisher floods them, then send a Close: the broker's
/// answering close waits behind a send they never take. Each stays counted (<c>/varz</c>, the registry,
/// <c>MaxConnections</c>) until its socket is gone, and the socket goes within <c>Limits:CloseTimeout</c>;
/// a bystander carries on meanwhile.
/// </summary>
public sealed class WebSocketCloseTests(ITestOutputHelper output)
{
    private const int Stalled = 6;
    private const int Others = 3; // the bystander, the flood's publisher, the bystander's publisher

    [Fact]
    public async Task Stalled_websocket_subscribers_that_send_a_close_hold_their_slots_until_their_sockets_are_gone()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxConnections = Stalled + Others;
            o.Limits.CloseTimeout = TimeSpan.FromMinutes(10); // never met here: the test ends the sockets itself
        });
        await using Attack attack = await Attack.StartAsync(broker, output);
        await attack.StallAndCloseAsync();

        // Every stalled session has ended its protocol part (the Close was read), and each is still counted.
        SessionRegistry registry = broker.Services.GetRequiredService<SessionRegistry>();
        output.WriteLine($"after the close: registry {registry.Count}, /varz {await VarzConnectionsAsync(broker)}, broker-side sockets {EstablishedOn(broker.HttpPort)}, test process RSS {Rss()} MB");
        Assert.Equal(Stalled + Others, registry.Count);
        Assert.Equal(Stalled + Others, await VarzConnectionsAsync(broker));

        // They hold their slots: a newcomer (WebSocket or TCP) is refused while the bystander carries on.
        await using (ProtocolClient newcomer = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort))
        {
            await newcomer.ExpectClosedWithAsync(ErrorCode.TooManyConnections);
        }

        await using (ProtocolClient newcomer = await ProtocolClient.ConnectAsync(broker.Port))
        {
            await newcomer.SendAsync(w => FrameWriter.WriteHello(w, "late", Capabilities.None, null));
            await newcomer.ExpectClosedWithAsync(ErrorCode.TooManyConnections);
        }

        await attack.BystanderCarriesOnAsync();

        // The clients end their sockets: only then are the slots free.
        await attack.AbortStalledAsync();
        await Until.True(() => registry.Count == Others && EstablishedOn(broker.HttpPort) == 0, "the stalled connections uncounted once their sockets are gone");
        await using ProtocolClient admitted = await ProtocolClient.OpenAsync(broker.Port, "admitted");
        await admitted.PingPongAsync();
        await attack.BystanderCarriesOnAsync();
    }

    [Fact]
    public async Task A_close_that_cannot_be_sent_within_the_close_timeout_is_aborted_and_the_socket_uncounted()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.CloseTimeout = TimeSpan.FromSeconds(1));
        await using Attack attack = await Attack.StartAsync(broker, output);
        await attack.StallAndCloseAsync();

        SessionRegistry registry = broker.Services.GetRequiredService<SessionRegistry>();
        output.WriteLine($"after the close: registry {registry.Count}, /varz {await VarzConnectionsAsync(broker)}, broker-side sockets {EstablishedOn(broker.HttpPort)}, test process RSS {Rss()} MB");
        await Until.True(() => EstablishedOn(broker.HttpPort) == 0, "the broker aborts the sockets whose close it could not send");
        await Until.True(() => registry.Count == Others, "the aborted connections uncounted");
        output.WriteLine($"after the close timeout: registry {registry.Count}, /varz {await VarzConnectionsAsync(broker)}, broker-side sockets {EstablishedOn(broker.HttpPort)}, test process RSS {Rss()} MB");
        Assert.Equal(Others, await VarzConnectionsAsync(broker));
        await attack.BystanderCarriesOnAsync();
    }

    private static async Task<int> VarzConnectionsAsync(TestBroker broker)
    {
        using JsonDocument varz = JsonDocument.Parse(await broker.Monitoring.GetStringAsync("/varz"));
        return varz.RootElement.GetProperty("connections").GetInt32();
    }

    /// <summary>ESTABLISHED sockets whose local port is <paramref name="port"/>: the broker's side of its HTTP connections (this broker's port, no other test's).</summary>
    private static int EstablishedOn(int port)
    {
        string local = ":" + port.ToString("X4", CultureInfo.InvariantCulture);
        int count = 0;
        foreach (string file in new[] { "/proc/net/tcp", "/proc/net/tcp6" })
        {
            foreach (string line in File.ReadLines(file).Skip(1))
            {
                string[] fields = line.Split(' ', StringSplitOptions.RemoveEmptyEntries);
                if (fields.Length > 3 && fields[1].EndsWith(local, StringComparison.Ordinal) && fields[3] == "01")
                {
                    count++;
                }
            }
        }

        return count;
    }

    private static long Rss() => Process.GetCurrentProcess().WorkingSet64 / (1024 * 1024);

    /// <summary>The stalled WebSocket subscribers, the flood's publisher, and a TCP bystander with its own publisher.</summary>
    private sealed class Attack : IAsyncDisposable
    {
        private readonly TestBroker _broker;
        private readonly ITestOutputHelper _output;
        private readonly List<(ProtocolClient Client, WebSocket WebSocket)> _stalled = [];
        private ProtocolClient _bystander = null!;
        private ProtocolClient _flood = null!;
        private ProtocolClient _bystanderPublisher = null!;
        private int _said;

        private Attack(TestBroker broker, ITestOutputHelper output)
        {
            _broker = broker;
            _output = output;
        }

        public static async Task<Attack> StartAsync(TestBroker broker, ITestOutputHelper output)
        {
            var attack = new Attack(broker, output);
            attack._bystander = await ProtocolClient.OpenAsync(broker.Port, "bystander");
            await attack._bystander.SubscribeAsync(1, "by");
            await attack._bystander.PingPongAsync();
            attack._bystanderPublisher = await ProtocolClient.OpenAsync(broker.Port, "bystander-publisher");
            attack._flood = await ProtocolClient.OpenAsync(broker.Port, "flood");
            for (int i = 0; i < Stalled; i++)
            {
                (ProtocolClient client, WebSocket webSocket) = await ProtocolClient.ConnectRawWebSocketAsync(broker.HttpPort, receiveBufferSize: 8 * 1024);
                attack._stalled.Add((client, webSocket));
                await client.HelloAsync($"stalled-{i}");
                await client.SubscribeAsync(1, "feed");
                await client.PingPongAsync();
            }

            return attack;
        }

        /// <summary>
        /// Floods the stalled subscribers (who read nothing more) until the broker holds a backlog for each (its send
        /// to it blocked), then each sends a Close; returns when the broker has read every Close (each stalled session
        /// ended or closing).
        /// </summary>
        public async Task StallAndCloseAsync()
        {
            SessionRegistry registry = _broker.Services.GetRequiredService<SessionRegistry>();
            ProtocolSession[] stalled = registry.Sessions.Where(s => s.Transport == "websocket").ToArray();
            Assert.Equal(Stalled, stalled.Length);
            _output.WriteLine($"before: registry {registry.Count}, /varz {await VarzConnectionsAsync(_broker)}, broker-side sockets {EstablishedOn(_broker.HttpPort)}, test process RSS {Rss()} MB");
            byte[] payload = new byte[16 * 1024];
            int published = 0;
            await Until.True(
                async () =>
                {
                    for (int i = 0; i < 8; i++)
                    {
                        await _flood.PublishAsync("feed", payload);
                    }

                    published += 8;
                    await _flood.PingPongAsync(); // routed to every backlog before it is looked at
                    return stalled.All(s => s.Backlog.Pending.Bytes > 256 * 1024); // beyond what one drained batch takes: the drain is stuck in a send
                },
                "every stalled subscriber's send blocked, its backlog growing");
            _output.WriteLine($"flooded: {published} publications of 16 KiB; backlogs {string.Join(", ", stalled.Select(s => s.Backlog.Pending.Bytes))} bytes; test process RSS {Rss()} MB");

            foreach ((_, WebSocket webSocket) in _stalled)
            {
                await webSocket.CloseOutputAsync(WebSocketCloseStatus.NormalClosure, "bye", CancellationToken.None); // sent; nothing is read
            }

            await Until.True(() => stalled.All(s => s.IsClosing || !registry.Sessions.Contains(s)), "the broker read every Close");
        }

        public async Task BystanderCarriesOnAsync()
        {
            string said = $"still here {++_said}";
            await _bystanderPublisher.PublishAsync("by", said);
            Assert.Equal(said, (await _bystander.ReadMessageAsync()).Text);
        }

        /// <summary>The stalled clients drop their sockets (a reset: they never read what was sent).</summary>
        public async Task AbortStalledAsync()
        {
            foreach ((ProtocolClient client, WebSocket webSocket) in _stalled)
            {
                webSocket.Abort();
                await client.DisposeAsync();
            }

            _stalled.Clear();
        }

        public async ValueTask DisposeAsync()
        {
            await AbortStalledAsync();
            await _bystander.DisposeAsync();
            await _flood.DisposeAsync();
            await _bystanderPublisher.DisposeAsync();
        }
    }
}
