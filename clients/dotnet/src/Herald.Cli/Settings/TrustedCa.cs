using System.Net.Security;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;

namespace Herald.Cli.Settings;

/// <summary>
/// <c>--tls-ca FILE</c>: the broker's certificate is accepted when it chains to a certificate of that PEM file
/// (a private CA, or the broker's self-signed certificate itself) and names the host; the system's roots are
/// still accepted as they are. Used for the broker connection and the monitoring requests alike.
/// </summary>
internal sealed class TrustedCa
{
    private readonly X509Certificate2Collection _roots = [];

    private TrustedCa(string path)
    {
        try
        {
            _roots.ImportFromPemFile(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or CryptographicException)
        {
            throw new CliException(ExitCodes.Failure, $"cannot read the TLS CA file '{path}': {e.Message}");
        }

        if (_roots.Count == 0)
        {
            throw new CliException(ExitCodes.Failure, $"the TLS CA file '{path}' holds no PEM certificate");
        }
    }

    public static TrustedCa? From(string? path) => path is null ? null : new TrustedCa(path);

    public bool Validate(object sender, X509Certificate? certificate, X509Chain? chain, SslPolicyErrors errors)
    {
        if (errors == SslPolicyErrors.None)
        {
            return true;
        }

        if (certificate is null || (errors & ~SslPolicyErrors.RemoteCertificateChainErrors) != 0)
        {
            return false; // no certificate, or one for another host: no CA makes that right
        }

        using var custom = new X509Chain();
        custom.ChainPolicy.TrustMode = X509ChainTrustMode.CustomRootTrust;
        custom.ChainPolicy.CustomTrustStore.AddRange(_roots);
        custom.ChainPolicy.RevocationMode = X509RevocationMode.NoCheck;
        if (chain is not null)
        {
            custom.ChainPolicy.ExtraStore.AddRange(chain.ChainPolicy.ExtraStore);
        }

        using X509Certificate2 leaf = X509CertificateLoader.LoadCertificate(certificate.GetRawCertData());
        return custom.Build(leaf);
    }
}
