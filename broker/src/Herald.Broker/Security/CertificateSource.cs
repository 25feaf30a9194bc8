using System.Security.Cryptography.X509Certificates;

namespace Herald.Broker.Security;

/// <summary>
/// The server certificate for TLS, loaded from <see cref="TlsOptions.CertificatePath"/> and reloaded
/// when the file changes (checked at most every few seconds, on handshakes), so a renewed certificate
/// is used without a restart.
/// </summary>
internal sealed class CertificateSource
{
    private static readonly TimeSpan CheckEvery = TimeSpan.FromSeconds(5);

    private readonly TlsOptions _options;
    private readonly Lock _gate = new();
    private X509Certificate2 _current;
    private DateTime _loadedWriteTime;
    private long _checkedAt;

    public CertificateSource(TlsOptions options)
    {
        _options = options;
        _current = Load();
        _loadedWriteTime = LastWrite();
        _checkedAt = Environment.TickCount64;
    }

    public X509Certificate2 Current
    {
        get
        {
            if (Environment.TickCount64 - Volatile.Read(ref _checkedAt) < CheckEvery.TotalMilliseconds)
            {
                return _current;
            }

            lock (_gate)
            {
                _checkedAt = Environment.TickCount64;
                DateTime written = LastWrite();
                if (written != _loadedWriteTime)
                {
                    try
                    {
                        _current = Load();
                        _loadedWriteTime = written;
                    }
                    catch (Exception e) when (e is IOException or System.Security.Cryptography.CryptographicException)
                    {
                        // Half-written or invalid: keep serving the previous certificate, try again later.
                    }
                }

                return _current;
            }
        }
    }

    private X509Certificate2 Load()
    {
        string path = _options.CertificatePath!;
        if (!string.IsNullOrEmpty(_options.KeyPath))
        {
            return string.IsNullOrEmpty(_options.Password)
                ? X509Certificate2.CreateFromPemFile(path, _options.KeyPath)
                : X509Certificate2.CreateFromEncryptedPemFile(path, _options.Password, _options.KeyPath);
        }

        return X509CertificateLoader.LoadPkcs12FromFile(path, _options.Password);
    }

    private DateTime LastWrite() => File.GetLastWriteTimeUtc(_options.CertificatePath!) > File.GetLastWriteTimeUtc(_options.KeyPath ?? _options.CertificatePath!)
        ? File.GetLastWriteTimeUtc(_options.CertificatePath!)
        : File.GetLastWriteTimeUtc(_options.KeyPath ?? _options.CertificatePath!);
}
