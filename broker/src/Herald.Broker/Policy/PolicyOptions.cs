using System.ComponentModel.DataAnnotations;

namespace Herald.Broker.Policy;

/// <summary>The Silverlight/Flash socket policy (protocol-spec/longpoll.md §4).</summary>
public sealed class PolicyOptions
{
    /// <summary>TCP port of the policy responder. Below 1024 needs root or CAP_NET_BIND_SERVICE; 0 binds an ephemeral port (tests); -1 turns it off.</summary>
    [Range(-1, 65535)]
    public int Port { get; set; } = 943;

    /// <summary>Domains granted access, in both the socket and the HTTP policies and CORS. <c>*</c> is everyone.</summary>
    public string[] AllowedDomains { get; set; } = ["*"];

    /// <summary>How long a policy client has to send its request.</summary>
    public TimeSpan Timeout { get; set; } = TimeSpan.FromSeconds(3);

    /// <summary>
    /// Most policy connections served at once. At the limit a new connection takes the place of the oldest
    /// one that has not yet sent its whole request (idle sockets are shed first); only when every one has,
    /// is the new one closed at once.
    /// </summary>
    [Range(1, 1_000_000)]
    public int MaxConcurrentRequests { get; set; } = 1_000;

    /// <summary>
    /// Most policy connections from one address that have not yet sent their whole request. Past it, that
    /// address's oldest such connection is closed to make room, so one address never holds more.
    /// </summary>
    [Range(1, 1_000_000)]
    public int MaxConnectionsPerAddress { get; set; } = 100;
}
