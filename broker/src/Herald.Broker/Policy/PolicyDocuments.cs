using System.Text;
using System.Xml.Linq;
using Herald.Broker.Transports;

namespace Herald.Broker.Policy;

/// <summary>
/// The Silverlight and Flash policy documents (protocol-spec/longpoll.md §4), built once from the
/// configured port range (or, for an ephemeral port, the one bound) and domains, on first use, which
/// comes after the listeners are bound. XML is produced by <see cref="XDocument"/>, so a domain is
/// always escaped, never spliced into markup.
/// </summary>
internal sealed class PolicyDocuments
{
    private readonly Lazy<byte[][]> _documents;

    public PolicyDocuments(PolicyOptions options, int portRangeStart, int portRangeEnd, Listeners listeners)
    {
        _documents = new Lazy<byte[][]>(() =>
        {
            (int first, int last) = portRangeStart == 0
                ? (listeners.TcpPorts.Min(), listeners.TcpPorts.Max())
                : (portRangeStart, portRangeEnd);
            string ports = $"{first}-{last}";
            string[] domains = options.AllowedDomains;
            return
            [
                Encode(ClientAccessPolicy(domains, new XElement("socket-resource", new XAttribute("port", ports), new XAttribute("protocol", "tcp")))),
                [.. Encode(CrossDomainPolicy(domains, ports)), 0], // Flash reads the socket policy up to a NUL
                Encode(ClientAccessPolicy(domains, new XElement("resource", new XAttribute("path", "/"), new XAttribute("include-subpaths", "true")))),
                Encode(CrossDomainPolicy(domains, toPorts: null)),
            ];
        });
    }

    /// <summary>Answer to Silverlight's <c>&lt;policy-file-request/&gt;</c> on the policy port.</summary>
    public byte[] SocketClientAccessPolicy => _documents.Value[0];

    /// <summary>Answer to Flash's request on the policy port, NUL-terminated.</summary>
    public byte[] SocketCrossDomainPolicy => _documents.Value[1];

    /// <summary><c>/clientaccesspolicy.xml</c> over HTTP.</summary>
    public byte[] HttpClientAccessPolicy => _documents.Value[2];

    /// <summary><c>/crossdomain.xml</c> over HTTP.</summary>
    public byte[] HttpCrossDomainPolicy => _documents.Value[3];

    private static XDocument ClientAccessPolicy(string[] domains, XElement grant)
    {
        var allowFrom = new XElement("allow-from", new XAttribute("http-request-headers", "*"));
        foreach (string domain in domains)
        {
            allowFrom.Add(new XElement("domain", new XAttribute("uri", domain)));
        }

        return new XDocument(
            new XDeclaration("1.0", "utf-8", null),
            new XElement("access-policy",
                new XElement("cross-domain-access",
                    new XElement("policy", allowFrom, new XElement("grant-to", grant)))));
    }

    private static XDocument CrossDomainPolicy(string[] domains, string? toPorts)
    {
        var root = new XElement("cross-domain-policy",
            new XElement("site-control", new XAttribute("permitted-cross-domain-policies", toPorts is null ? "master-only" : "all")));
        foreach (string domain in domains)
        {
            var allow = new XElement("allow-access-from", new XAttribute("domain", domain));
            if (toPorts is not null)
            {
                allow.Add(new XAttribute("to-ports", toPorts));
            }

            root.Add(allow);
        }

        if (toPorts is null)
        {
            foreach (string domain in domains)
            {
                root.Add(new XElement("allow-http-request-headers-from", new XAttribute("domain", domain), new XAttribute("headers", "*")));
            }
        }

        return new XDocument(new XDeclaration("1.0", "utf-8", null), root);
    }

    private static byte[] Encode(XDocument document) => Encoding.UTF8.GetBytes(document.Declaration + "\n" + document.Root!.ToString(SaveOptions.None) + "\n");
}
