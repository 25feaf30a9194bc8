using System.Net;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;
using Herald.Cli.Tests.Infrastructure;
using Herald.Client.Tests.Infrastructure;
using Herald.Testing;

namespace Herald.Cli.Tests;

/// <summary>A broker with TLS on its TCP ports, its certificate self-signed for localhost and 127.0.0.1.</summary>
public sealed class TlsBroker : IAsyncLifetime
{
    private readonly string _folder = Directory.CreateTempSubdirectory("herald-cli-tls-").FullName;

    public TestBroker Broker { get; private set; } = null!;

    /// <summary>The broker's certificate, as a PEM file <c>--tls-ca</c> takes.</summary>
    public string CertificatePem => Path.Combine(_folder, "broker.pem");

    /// <summary>Another self-signed certificate for localhost: trusting it must not trust the broker.</summary>
    public string OtherPem => Path.Combine(_folder, "other.pem");

    public async Task InitializeAsync()
    {
        using X509Certificate2 certificate = TestCertificates.SelfSigned();
        using X509Certificate2 other = TestCertificates.SelfSigned();
        string pfx = Path.Combine(_folder, "broker.pfx");
        await File.WriteAllBytesAsync(pfx, certificate.Export(X509ContentType.Pfx, "test"));
        await File.WriteAllTextAsync(CertificatePem, certificate.ExportCertificatePem());
        await File.WriteAllTextAsync(OtherPem, other.ExportCertificatePem());
        Broker = await TestBroker.StartAsync(o =>
        {
            o.Security.Tls.CertificatePath = pfx;
            o.Security.Tls.Password = "test";
            o.Security.Tls.TcpPorts = "all";
        });
    }

    public async Task DisposeAsync()
    {
        await Broker.DisposeAsync();
        Directory.Delete(_folder, recursive: true);
    }
}

/// <summary><c>--tls-ca</c> (and <c>HERALD_TLS_CA</c>): the broker's own certificate trusted, and nothing else.</summary>
[Collection(ToolCollection.Name)]
public sealed class TlsTests(ToolFixture tool, TlsBroker fixture) : CliTest(tool), IClassFixture<TlsBroker>
{
    private string Server => $"tls://localhost:{fixture.Broker.TcpPort}";

    [Fact]
    public async Task With_the_brokers_certificate_as_tls_ca_pub_reaches_sub_over_tls()
    {
        string topic = Unique("cli.tls");
        await using HeraldRun sub = Start(["sub", topic, "--count", "1", "--server", Server, "--tls-ca", fixture.CertificatePem]);
        await sub.WaitForErrorLineAsync("Subscribed to");

        AssertExit(0, await RunAsync(["pub", topic, "sealed", "--server", Server], new Dictionary<string, string> { ["HERALD_TLS_CA"] = fixture.CertificatePem }));

        Assert.Equal(0, await sub.WaitForExitAsync());
        Assert.Equal($"[#1] {topic} (6 bytes)\nsealed\n", sub.Output);
    }

    [Fact]
    public async Task Without_it_or_with_another_certificate_the_connection_fails_with_exit_3()
    {
        HeraldRun untrusted = await RunAsync(["pub", "cli.tls", "x", "--server", Server]);
        HeraldRun other = await RunAsync(["pub", "cli.tls", "x", "--server", Server, "--tls-ca", fixture.OtherPem]);
        HeraldRun missing = await RunAsync(["pub", "cli.tls", "x", "--server", Server, "--tls-ca", fixture.OtherPem + ".missing"]);

        AssertExit(3, untrusted);
        Assert.StartsWith("herald: cannot connect", untrusted.Error, StringComparison.Ordinal);
        AssertExit(3, other);
        AssertNoStackTrace(other);
        AssertExit(1, missing);
        Assert.Contains("cannot read the TLS CA file", missing.Error, StringComparison.Ordinal);
    }
}
