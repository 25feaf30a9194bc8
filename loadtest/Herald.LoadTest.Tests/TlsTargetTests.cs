using System.Net;
using System.Net.Sockets;
using System.Security.Authentication;
using Herald.LoadTest.Client;
using Herald.LoadTest.Peers.Nats;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Tests;

/// <summary>
/// <c>--transport tls</c> beyond the shared contract (<see cref="TargetContractTests"/> runs it on both
/// targets): the server the tool starts really requires TLS, so a plain client is refused, and the tool's
/// clients trust only the certificate it made, by thumbprint.
/// </summary>
public class TlsTargetTests
{
    [Fact]
    public async Task A_started_herald_speaks_only_tls_on_its_tcp_ports()
    {
        await using ITarget server = await TargetContractTests.StartAsync("herald", "tls");
        var herald = (HeraldTarget)server;
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(20));

        // A plain HELLO is not a TLS ClientHello: the broker drops the connection instead of answering WELCOME.
        await Assert.ThrowsAnyAsync<Exception>(() => HeraldConnection.ConnectAsync(herald.Endpoints.For(0), "plain", timeout.Token));
        await Assert.ThrowsAnyAsync<Exception>(() => HeraldConnection.ConnectAsync(herald.Endpoints.For(1), "plain", timeout.Token));

        await using IPubSubClient client = await server.ConnectAsync(0, timeout.Token);
        Assert.Null(client.Failure);
        Assert.Equal("tls", server.Transport);
    }

    [Fact]
    public async Task A_started_nats_server_requires_tls_and_a_plain_client_is_told_so()
    {
        Repo.EnsurePeerServers();
        int port = Repo.FreePorts(1);
        TargetOptions options = Repo.TargetOptionsOf(["--target", "nats", "--transport", "tls", "--port", port.ToString(System.Globalization.CultureInfo.InvariantCulture), "--setup-timeout", "60"]);
        await using ITarget server = await TargetFactory.StartAsync(options, CancellationToken.None);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(20));

        IOException plain = await Assert.ThrowsAsync<IOException>(() => NatsConnection.ConnectAsync(new IPEndPoint(IPAddress.Loopback, port), "plain", timeout.Token));
        Assert.Contains("requires TLS", plain.Message, StringComparison.Ordinal);
        Assert.Contains("--tls", server.ServerCommandLine, StringComparison.Ordinal);
        Assert.Equal("tls", server.Transport);
    }

    [Fact]
    public async Task A_client_trusts_the_tools_certificate_by_thumbprint_and_no_other()
    {
        await using ITarget server = await TargetContractTests.StartAsync("herald", "tls");
        IPEndPoint endPoint = ((HeraldTarget)server).Endpoints.For(0);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(20));

        using (var socket = new Socket(endPoint.AddressFamily, SocketType.Stream, ProtocolType.Tcp))
        {
            await socket.ConnectAsync(endPoint, timeout.Token);
            await using var trusted = await TlsClient.AuthenticateAsync(socket, "127.0.0.1", LoopbackCertificate.Instance.Thumbprint, timeout.Token);
            Assert.True(trusted.IsEncrypted);
        }

        using (var socket = new Socket(endPoint.AddressFamily, SocketType.Stream, ProtocolType.Tcp))
        {
            await socket.ConnectAsync(endPoint, timeout.Token);
            await Assert.ThrowsAsync<AuthenticationException>(() => TlsClient.AuthenticateAsync(socket, "127.0.0.1", new string('0', 40), timeout.Token));
        }

        using (var socket = new Socket(endPoint.AddressFamily, SocketType.Stream, ProtocolType.Tcp))
        {
            await socket.ConnectAsync(endPoint, timeout.Token);
            await Assert.ThrowsAsync<AuthenticationException>(() => TlsClient.AuthenticateAsync(socket, "127.0.0.1", trustedThumbprint: null, timeout.Token)); // self-signed: not in the system's CAs
        }
    }
}
