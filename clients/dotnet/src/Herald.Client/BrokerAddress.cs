using System.Globalization;
using System.Security.Cryptography;

namespace Herald.Client;

/// <summary>
/// A parsed broker address. <c>tcp://host[:port[-port]]</c> or <c>tls://...</c> (default port 4502; a
/// range spreads connections over the broker's listeners, spec §1), an <c>http://</c>/<c>https://</c> base address
/// for the long-poll transport (a path is kept as a prefix, for a broker behind a reverse proxy), or a
/// <c>ws://</c>/<c>wss://</c> WebSocket endpoint (the path <c>/ws</c> when none is given: the broker's own).
/// </summary>
internal sealed class BrokerAddress
{
    public const int DefaultTcpPort = 4502;

    /// <summary>Where the broker serves WebSocket on its HTTP port (spec §1).</summary>
    public const string DefaultWebSocketPath = "/ws";

    private BrokerAddress(HeraldTransport transport, string host, int firstPort, int lastPort, Uri? httpBase, bool tls, Uri? webSocket = null)
    {
        Transport = transport;
        Tls = tls;
        Host = host;
        FirstPort = firstPort;
        LastPort = lastPort;
        HttpBase = httpBase;
        WebSocket = webSocket;
    }

    public HeraldTransport Transport { get; }

    /// <summary><c>tls://</c>, <c>https://</c> or <c>wss://</c>.</summary>
    public bool Tls { get; }

    public string Host { get; }

    public int FirstPort { get; }

    public int LastPort { get; }

    /// <summary>Long-poll: the base address, ending in '/'.</summary>
    public Uri? HttpBase { get; }

    /// <summary>WebSocket: the endpoint to upgrade at.</summary>
    public Uri? WebSocket { get; }

    /// <summary>A port of the range for the next connection, at random so clients spread over the listeners.</summary>
    public int PickPort() => FirstPort == LastPort ? FirstPort : RandomNumberGenerator.GetInt32(FirstPort, LastPort + 1);

    public override string ToString() => Transport switch
    {
        HeraldTransport.LongPoll => HttpBase!.ToString(),
        HeraldTransport.WebSocket => WebSocket!.ToString(),
        _ => string.Create(CultureInfo.InvariantCulture, $"{(Tls ? "tls" : "tcp")}://{(Host.Contains(':', StringComparison.Ordinal) ? $"[{Host}]" : Host)}:{FirstPort}{(LastPort != FirstPort ? $"-{LastPort}" : "")}"),
    };

    /// <exception cref="ArgumentException">Not an address of one of the forms above.</exception>
    public static BrokerAddress Parse(string url)
    {
        ArgumentException.ThrowIfNullOrWhiteSpace(url);
        const string TcpScheme = "tcp://", TlsScheme = "tls://";
        if (url.StartsWith(TcpScheme, StringComparison.OrdinalIgnoreCase))
        {
            return ParseTcp(url, url[TcpScheme.Length..], tls: false);
        }

        if (url.StartsWith(TlsScheme, StringComparison.OrdinalIgnoreCase))
        {
            return ParseTcp(url, url[TlsScheme.Length..], tls: true);
        }

        if (Uri.TryCreate(url, UriKind.Absolute, out Uri? uri) && (uri.Scheme == Uri.UriSchemeHttp || uri.Scheme == Uri.UriSchemeHttps))
        {
            if (!string.IsNullOrEmpty(uri.Query) || !string.IsNullOrEmpty(uri.Fragment))
            {
                throw Bad(url, "a long-poll address takes no query or fragment");
            }

            string text = uri.GetLeftPart(UriPartial.Path);
            return new BrokerAddress(HeraldTransport.LongPoll, uri.Host, uri.Port, uri.Port, new Uri(text.EndsWith('/') ? text : text + "/"), uri.Scheme == Uri.UriSchemeHttps);
        }

        if (uri is not null && (uri.Scheme == Uri.UriSchemeWs || uri.Scheme == Uri.UriSchemeWss))
        {
            if (!string.IsNullOrEmpty(uri.Query) || !string.IsNullOrEmpty(uri.Fragment))
            {
                throw Bad(url, "a WebSocket address takes no query or fragment");
            }

            var endpoint = new UriBuilder(uri) { Path = uri.AbsolutePath == "/" ? DefaultWebSocketPath : uri.AbsolutePath };
            return new BrokerAddress(HeraldTransport.WebSocket, uri.Host, uri.Port, uri.Port, httpBase: null, uri.Scheme == Uri.UriSchemeWss, endpoint.Uri);
        }

        throw Bad(url, "it must start with tcp://, tls://, ws://, wss://, http:// or https://");
    }

    private static BrokerAddress ParseTcp(string url, string rest, bool tls)
    {
        rest = rest.TrimEnd('/');
        if (rest.Contains('/', StringComparison.Ordinal) || rest.Contains('?', StringComparison.Ordinal) || rest.Contains('@', StringComparison.Ordinal))
        {
            throw Bad(url, "a tcp:// or tls:// address is only a host and a port or port range");
        }

        string host;
        string? ports = null;
        if (rest.StartsWith('['))
        {
            int close = rest.IndexOf(']', StringComparison.Ordinal);
            if (close < 0)
            {
                throw Bad(url, "the IPv6 address has no closing ']'");
            }

            host = rest[1..close];
            string after = rest[(close + 1)..];
            if (after.Length > 0)
            {
                if (after[0] != ':')
                {
                    throw Bad(url, "expected ':' and a port after the IPv6 address");
                }

                ports = after[1..];
            }
        }
        else
        {
            int colon = rest.IndexOf(':', StringComparison.Ordinal);
            if (colon >= 0 && rest.IndexOf(':', colon + 1) >= 0)
            {
                throw Bad(url, "write an IPv6 address in brackets: tcp://[::1]:4502");
            }

            host = colon < 0 ? rest : rest[..colon];
            ports = colon < 0 ? null : rest[(colon + 1)..];
        }

        if (host.Length == 0)
        {
            throw Bad(url, "the host is missing");
        }

        int first = DefaultTcpPort, last = DefaultTcpPort;
        if (ports is not null)
        {
            int dash = ports.IndexOf('-', StringComparison.Ordinal);
            first = Port(url, dash < 0 ? ports : ports[..dash]);
            last = dash < 0 ? first : Port(url, ports[(dash + 1)..]);
            if (last < first)
            {
                throw Bad(url, $"the port range {first}-{last} is backwards");
            }
        }

        return new BrokerAddress(HeraldTransport.Tcp, host, first, last, httpBase: null, tls);
    }

    private static int Port(string url, string text) =>
        int.TryParse(text, NumberStyles.None, CultureInfo.InvariantCulture, out int port) && port is >= 1 and <= 65535
            ? port
            : throw Bad(url, $"'{text}' is not a port (1-65535)");

    private static ArgumentException Bad(string url, string why) => new($"'{url}' is not a Herald broker address: {why}.", nameof(url));
}
