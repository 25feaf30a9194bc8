using System.Buffers;
using System.Net;
using System.Net.Security;
using System.Net.Sockets;
using System.Security.Authentication;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using MessagePack;
using Herald.Testing;

namespace Herald.Broker.Tests;

public sealed class TlsTests : IDisposable
{
    private readonly string _pfx = Path.Combine(Path.GetTempPath(), $"herald-test-{Guid.NewGuid():N}.pfx");
    private readonly string _thumbprint;

    public TlsTests()
    {
        using X509Certificate2 certificate = TestCertificates.SelfSigned();
        File.WriteAllBytes(_pfx, certificate.Export(X509ContentType.Pfx, "test"));
        _thumbprint = certificate.GetCertHashString();
    }

    public void Dispose() => File.Delete(_pfx);

    [Fact]
    public async Task Tcp_speaks_tls_on_the_configured_ports_and_plain_beside_it()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Tcp.PortRangeStart = FreePort(out int second);
            o.Tcp.PortRangeEnd = second;
            o.Security.Tls.CertificatePath = _pfx;
            o.Security.Tls.Password = "test";
            o.Security.Tls.TcpPorts = $"{o.Tcp.PortRangeStart}-{o.Tcp.PortRangeStart}";
        });
        int tlsPort = broker.Ports[0];
        int plainPort = broker.Ports[1];

        using var tcp = new TcpClient();
        await tcp.ConnectAsync(IPAddress.Loopback, tlsPort);
        await using var tls = new SslStream(tcp.GetStream(), false, (_, certificate, _, _) => IsOurs(certificate));
        await tls.AuthenticateAsClientAsync(new SslClientAuthenticationOptions { TargetHost = "localhost", EnabledSslProtocols = SslProtocols.Tls12 | SslProtocols.Tls13 });
        Assert.True(tls.SslProtocol is SslProtocols.Tls12 or SslProtocols.Tls13);
        var hello = new ArrayBufferWriter<byte>();
        FrameWriter.WriteHello(hello, "tls", Capabilities.None);
        FrameWriter.WriteSubscribe(hello, 1, "secure.news"u8);
        FrameWriter.WritePing(hello);
        await tls.WriteAsync(hello.WrittenMemory);
        Assert.Equal(FrameType.Welcome, await ReadTypeAsync(tls));
        Assert.Equal(FrameType.Pong, await ReadTypeAsync(tls));

        await using var plain = await ProtocolClient.OpenAsync(plainPort); // plain TCP on the other port
        await plain.PublishAsync("secure.news", "over plain, read over TLS");
        Assert.Equal(FrameType.Message, await ReadTypeAsync(tls));

        // A plain client on the TLS port gets nowhere.
        await using var wrong = await ProtocolClient.ConnectAsync(tlsPort);
        await wrong.SendAsync(w => FrameWriter.WriteHello(w, "plain", Capabilities.None));
        Assert.Null(await wrong.TryReadAsync(TimeSpan.FromSeconds(20)));
    }

    [Fact]
    public async Task Http_long_poll_runs_over_tls()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Security.Tls.CertificatePath = _pfx;
            o.Security.Tls.Password = "test";
            o.Security.Tls.Http = true;
        });
        using var handler = new HttpClientHandler { ServerCertificateCustomValidationCallback = (_, certificate, _, _) => IsOurs(certificate) };
        using var https = new HttpClient(handler) { BaseAddress = new Uri($"https://127.0.0.1:{broker.HttpPort}") };

        LongPollClient client = await LongPollClient.CreateAsync(https);
        await client.SubscribeAsync(1, "t");
        using (await client.PublishAsync("t", "encrypted"))
        {
        }

        Assert.Equal("encrypted", Assert.Single((await client.PollAsync(0)).Messages).Text);
    }

    [Fact]
    public async Task A_websocket_runs_over_tls_on_the_http_port()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Security.Tls.CertificatePath = _pfx;
            o.Security.Tls.Password = "test";
            o.Security.Tls.Http = true;
        });
        using var socket = new System.Net.WebSockets.ClientWebSocket();
        socket.Options.AddSubProtocol("herald.v1");
        socket.Options.RemoteCertificateValidationCallback = (_, certificate, _, _) => IsOurs(certificate);
        await socket.ConnectAsync(new Uri($"wss://127.0.0.1:{broker.HttpPort}/ws"), CancellationToken.None);
        await using Stream wss = System.Net.WebSockets.WebSocketStream.Create(socket, System.Net.WebSockets.WebSocketMessageType.Binary, ownsWebSocket: false);
        var hello = new ArrayBufferWriter<byte>();
        FrameWriter.WriteHello(hello, "wss", Capabilities.None);
        FrameWriter.WriteSubscribe(hello, 1, "secure.news"u8);
        FrameWriter.WritePing(hello);
        await wss.WriteAsync(hello.WrittenMemory);
        Assert.Equal(FrameType.Welcome, await ReadTypeAsync(wss));
        Assert.Equal(FrameType.Pong, await ReadTypeAsync(wss));

        await using var plain = await ProtocolClient.OpenAsync(broker.Port);
        await plain.PublishAsync("secure.news", "over plain TCP, read over wss");
        Assert.Equal(FrameType.Message, await ReadTypeAsync(wss));
    }

    /// <summary>Trusts exactly the self-signed certificate this test made, nothing else.</summary>
    private bool IsOurs(X509Certificate? certificate) => certificate is not null && certificate.GetCertHashString() == _thumbprint;

    private static async Task<FrameType> ReadTypeAsync(Stream stream)
    {
        byte[] prefix = new byte[4];
        await stream.ReadExactlyAsync(prefix);
        byte[] body = new byte[System.Buffers.Binary.BinaryPrimitives.ReadUInt32BigEndian(prefix)];
        await stream.ReadExactlyAsync(body);
        var reader = new MessagePackReader(body);
        return FrameDecoder.ReadHeader(ref reader, out _);
    }

    /// <summary>Two consecutive free ports of the broker tests' range (<see cref="Herald.Testing.TestPorts"/>).</summary>
    private static int FreePort(out int next)
    {
        int first = Herald.Testing.TestPorts.Free(2);
        next = first + 1;
        return first;
    }
}

public sealed class AbuseLimitTests
{
    [Fact]
    public async Task Over_max_connections_is_refused_with_an_error()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.MaxConnections = 2);
        await using var a = await ProtocolClient.OpenAsync(broker.Port);
        await using var b = await ProtocolClient.OpenAsync(broker.Port);

        await using var c = await ProtocolClient.ConnectAsync(broker.Port);

        Assert.Contains("maximum of 2", (await c.ExpectClosedWithAsync(ErrorCode.TooManyConnections)).Message, StringComparison.Ordinal);
        await a.PingPongAsync(); // the others carry on
    }

    [Fact]
    public async Task Over_max_connections_per_address_is_refused()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.MaxConnectionsPerAddress = 1);
        await using var first = await ProtocolClient.OpenAsync(broker.Port);

        await using var second = await ProtocolClient.ConnectAsync(broker.Port);

        Assert.Contains("127.0.0.1", (await second.ExpectClosedWithAsync(ErrorCode.TooManyConnections)).Message, StringComparison.Ordinal);
    }

    [Fact]
    public async Task A_publisher_over_its_rate_is_slowed_and_told_and_loses_nothing()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.PublishRatePerSecond = 200;
            o.Limits.PublishBurst = 20;
        });
        using MetricsProbe metrics = broker.Metrics();
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, "rate");
        await subscriber.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);

        await publisher.SendAsync(w =>
        {
            for (int i = 0; i < 100; i++)
            {
                FrameWriter.WritePublish(w, "rate"u8, default, PayloadFlags.None, BitConverter.GetBytes(i));
            }
        });

        Frame warning = await publisher.ReadAsync();
        Assert.Equal((ErrorCode.RateLimited, false), (warning.Error!.Value.Code, warning.Error.Value.Fatal));
        for (int i = 0; i < 100; i++)
        {
            Assert.Equal(i, BitConverter.ToInt32((await subscriber.ReadMessageAsync()).Payload));
        }

        // Every warning the publisher was sent (once per episode of debt; how many episodes depends on how
        // the reads fell) is counted once, and nothing else is: read up to a PING/PONG barrier.
        int warnings = 1;
        await publisher.SendAsync(FrameWriter.WritePing);
        for (Frame f = await publisher.ReadAsync(); f.Type != FrameType.Pong; f = await publisher.ReadAsync())
        {
            if (f.Type != FrameType.Ping)
            {
                Assert.Equal((ErrorCode.RateLimited, false), (f.Error!.Value.Code, f.Error.Value.Fatal));
                warnings++;
            }
        }

        Assert.Equal(warnings, metrics["herald.protocol.errors", "error.type", "RateLimited"]);
        Assert.Equal(warnings, metrics["herald.protocol.errors"]);
    }

    [Fact]
    public async Task Over_max_topics_a_subscribe_is_refused_and_the_connection_stays()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.MaxTopics = 2);
        await using var client = await ProtocolClient.OpenAsync(broker.Port);
        await client.SubscribeAsync(1, "a");
        await client.SubscribeAsync(2, "b");
        await client.SubscribeAsync(3, "a"); // an existing pattern is no new topic

        await client.SubscribeAsync(4, "c");

        Frame refused = await client.ReadAsync();
        Assert.Equal((ErrorCode.TooManyTopics, false), (refused.Error!.Value.Code, refused.Error.Value.Fatal));
        await client.PublishAsync("a", "still here");
        Assert.Equal(2, (await client.PingPongAsync()).Count); // sids 1 and 3
    }
}
