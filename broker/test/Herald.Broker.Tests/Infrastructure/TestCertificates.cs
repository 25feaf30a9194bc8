using System.Net;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;

namespace Herald.Testing;

/// <summary>Certificates for the TLS tests of the broker, the .NET client and the herald CLI (linked into each project).</summary>
public static class TestCertificates
{
    /// <summary>A fresh self-signed certificate for <c>localhost</c> and 127.0.0.1, valid for a day, with its private key.</summary>
    public static X509Certificate2 SelfSigned()
    {
        using var key = RSA.Create(2048);
        var request = new CertificateRequest("CN=localhost", key, HashAlgorithmName.SHA256, RSASignaturePadding.Pkcs1);
        var san = new SubjectAlternativeNameBuilder();
        san.AddIpAddress(IPAddress.Loopback);
        san.AddDnsName("localhost");
        request.CertificateExtensions.Add(san.Build());
        return request.CreateSelfSigned(DateTimeOffset.UtcNow.AddMinutes(-5), DateTimeOffset.UtcNow.AddDays(1));
    }
}
