using System.Net;
using System.Net.Security;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;

namespace Herald.LoadTest.Client;

/// <summary>
/// TLS for the tool's own clients (<c>--transport tls</c>): the client side of the handshake over a
/// connected socket, trusting the system's CAs or one certificate by its thumbprint, the same for every
/// target, so Herald's and NATS's TLS rows differ only by the server.
/// </summary>
internal static class TlsClient
{
    /// <summary>Runs the client handshake over <paramref name="socket"/> (TLS 1.2 or 1.3, as the server prefers).</summary>
    /// <exception cref="AuthenticationException">The handshake failed or the server's certificate is not trusted.</exception>
    public static async Task<SslStream> AuthenticateAsync(Socket socket, string host, string? trustedThumbprint, CancellationToken cancellationToken)
    {
        var ssl = new SslStream(new NetworkStream(socket, ownsSocket: false), leaveInnerStreamOpen: false,
            (_, certificate, _, errors) => errors == SslPolicyErrors.None
                || (trustedThumbprint is not null && certificate is not null && string.Equals(certificate.GetCertHashString(), trustedThumbprint, StringComparison.OrdinalIgnoreCase)));
        try
        {
            await ssl.AuthenticateAsClientAsync(new SslClientAuthenticationOptions { TargetHost = host }, cancellationToken);
            return ssl;
        }
        catch
        {
            await ssl.DisposeAsync();
            throw;
        }
    }
}

/// <summary>
/// The certificate a server the tool starts with TLS presents (Herald: <c>Herald:Security:Tls</c>;
/// nats-server: <c>--tls</c>): self-signed, ECDSA P-256, for <c>localhost</c> and the loopback addresses,
/// valid for a day. Made once per process, written as PEM files (certificate, key) to a directory only this
/// user can read, and deleted when the process exits. Clients trust it by <see cref="Thumbprint"/>.
/// </summary>
internal sealed class LoopbackCertificate
{
    private static readonly Lazy<LoopbackCertificate> Shared = new(Create);

    private LoopbackCertificate(string certificatePath, string keyPath, string thumbprint)
    {
        CertificatePath = certificatePath;
        KeyPath = keyPath;
        Thumbprint = thumbprint;
    }

    /// <summary>The one certificate of this process, made on first use.</summary>
    public static LoopbackCertificate Instance => Shared.Value;

    public string CertificatePath { get; }

    public string KeyPath { get; }

    /// <summary>SHA-1 thumbprint, hex, as <see cref="X509Certificate.GetCertHashString()"/> gives it.</summary>
    public string Thumbprint { get; }

    private static LoopbackCertificate Create()
    {
        using var key = ECDsa.Create(ECCurve.NamedCurves.nistP256);
        var request = new CertificateRequest("CN=localhost", key, HashAlgorithmName.SHA256);
        var names = new SubjectAlternativeNameBuilder();
        names.AddDnsName("localhost");
        names.AddIpAddress(IPAddress.Loopback);
        names.AddIpAddress(IPAddress.IPv6Loopback);
        request.CertificateExtensions.Add(names.Build());
        request.CertificateExtensions.Add(new X509KeyUsageExtension(X509KeyUsageFlags.DigitalSignature, critical: true));
        request.CertificateExtensions.Add(new X509EnhancedKeyUsageExtension([new Oid("1.3.6.1.5.5.7.3.1")], critical: false)); // server authentication
        using X509Certificate2 certificate = request.CreateSelfSigned(DateTimeOffset.UtcNow.AddMinutes(-5), DateTimeOffset.UtcNow.AddDays(1));

        string directory = Path.Combine(Path.GetTempPath(), $"herald-loadtest-tls-{Environment.ProcessId}");
        if (OperatingSystem.IsWindows())
        {
            Directory.CreateDirectory(directory);
        }
        else
        {
            Directory.CreateDirectory(directory, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute);
        }

        string certificatePath = Path.Combine(directory, "cert.pem");
        string keyPath = Path.Combine(directory, "key.pem");
        File.WriteAllText(certificatePath, certificate.ExportCertificatePem());
        File.WriteAllText(keyPath, key.ExportPkcs8PrivateKeyPem());
        AppDomain.CurrentDomain.ProcessExit += (_, _) =>
        {
            try
            {
                Directory.Delete(directory, recursive: true);
            }
            catch (IOException)
            {
                // already gone, or still open: the temp directory's own cleanup takes it
            }
        };
        return new LoopbackCertificate(certificatePath, keyPath, certificate.GetCertHashString());
    }
}

/// <summary>A client speaks TLS to <see cref="Host"/>, trusting the system's CAs or the certificate with <see cref="Thumbprint"/>.</summary>
internal sealed record TlsTrust(string Host, string? Thumbprint);
