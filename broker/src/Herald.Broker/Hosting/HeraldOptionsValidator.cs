using Herald.Protocol;
using Herald.Broker.Monitoring;
using Herald.Broker.Sessions;
using Herald.Broker.Transports.LongPoll;
using Herald.Broker.Transports.Tcp;
using System.ComponentModel.DataAnnotations;
using System.Net;
using Microsoft.Extensions.Options;

namespace Herald.Broker.Hosting;

/// <summary>Checks what data annotations cannot: cross-field rules and time spans. Runs at start.</summary>
internal sealed class HeraldOptionsValidator : IValidateOptions<HeraldOptions>
{
    public ValidateOptionsResult Validate(string? name, HeraldOptions options)
    {
        var failures = new List<string>();
        Annotations(failures, "Herald", options);
        Annotations(failures, "Herald:Tcp", options.Tcp);
        Annotations(failures, "Herald:Limits", options.Limits);
        Annotations(failures, "Herald:Http", options.Http);
        Annotations(failures, "Herald:LongPoll", options.LongPoll);
        Annotations(failures, "Herald:Sse", options.Sse);
        Check(failures, "Herald:Sse:HeartbeatInterval", options.Sse.HeartbeatInterval, TimeSpan.FromMilliseconds(100), TimeSpan.FromHours(1));
        Annotations(failures, "Herald:Policy", options.Policy);
        Annotations(failures, "Herald:Compression", options.Compression);
        Annotations(failures, "Herald:Logging", options.Logging);
        Annotations(failures, "Herald:Cluster", options.Cluster);
        ValidateCluster(failures, options.Cluster);
        Annotations(failures, "Herald:History", options.History);
        ValidateHistory(failures, options.History, options.Limits.MaxTopicLength);
        Check(failures, "Herald:Logging:ClientFaultInterval", options.Logging.ClientFaultInterval, TimeSpan.FromMilliseconds(100), TimeSpan.FromHours(1));
        ValidateSecurity(failures, options.Security);
        ValidateApi(failures, options);
        ValidateHook(failures, "Connect", options.Hooks.Connect, options.Limits);
        ValidateHook(failures, "Subscribe", options.Hooks.Subscribe, options.Limits);
        ValidateHook(failures, "Publish", options.Hooks.Publish, options.Limits);
        if (options.Compression.CpuBackoffStart > options.Compression.CpuDisableLimit)
        {
            failures.Add($"Herald:Compression:CpuBackoffStart ({options.Compression.CpuBackoffStart}) must not be above Herald:Compression:CpuDisableLimit ({options.Compression.CpuDisableLimit}).");
        }

        Check(failures, "Herald:Compression:ProbeInterval", options.Compression.ProbeInterval, TimeSpan.FromMilliseconds(1), TimeSpan.FromDays(1));
        if (!TryParseHost(options.Http.Host, out _))
        {
            failures.Add($"Herald:Http:Host '{options.Http.Host}' is not an IP address, 'localhost' or 'any'.");
        }

        Check(failures, "Herald:Http:RequestHeadersTimeout", options.Http.RequestHeadersTimeout, TimeSpan.FromMilliseconds(10), TimeSpan.FromMinutes(10));
        LongPollOptions poll = options.LongPoll;
        Check(failures, "Herald:LongPoll:PollTimeout", poll.PollTimeout, TimeSpan.FromMilliseconds(10), TimeSpan.FromHours(1));
        Check(failures, "Herald:LongPoll:InactivityTimeout", poll.InactivityTimeout, TimeSpan.FromMilliseconds(10), TimeSpan.FromDays(1));
        if (poll.InactivityTimeout <= poll.PollTimeout)
        {
            failures.Add($"Herald:LongPoll:InactivityTimeout ({poll.InactivityTimeout}) must be longer than Herald:LongPoll:PollTimeout ({poll.PollTimeout}).");
        }

        Check(failures, "Herald:LongPoll:EndedSessionMemory", poll.EndedSessionMemory, TimeSpan.Zero, TimeSpan.FromDays(1));
        if (poll.MaxDecompressedBytesPerBody < options.Limits.MaxFrameBytes)
        {
            failures.Add($"Herald:LongPoll:MaxDecompressedBytesPerBody ({poll.MaxDecompressedBytesPerBody}) must be at least Herald:Limits:MaxFrameBytes ({options.Limits.MaxFrameBytes}).");
        }

        if (poll.MaxPendingBytesTotal < options.Limits.MaxPendingBytes)
        {
            failures.Add($"Herald:LongPoll:MaxPendingBytesTotal ({poll.MaxPendingBytesTotal}) must be at least Herald:Limits:MaxPendingBytes ({options.Limits.MaxPendingBytes}).");
        }

        Check(failures, "Herald:Policy:Timeout", options.Policy.Timeout, TimeSpan.FromMilliseconds(10), TimeSpan.FromMinutes(1));
        if (options.Policy.AllowedDomains.Length == 0 || options.Policy.AllowedDomains.Any(string.IsNullOrWhiteSpace))
        {
            failures.Add("Herald:Policy:AllowedDomains must list at least one domain (or '*'), none empty.");
        }
        TcpOptions tcp = options.Tcp;
        if (tcp.PortRangeEnd < tcp.PortRangeStart)
        {
            failures.Add($"Herald:Tcp:PortRangeEnd ({tcp.PortRangeEnd}) is below Herald:Tcp:PortRangeStart ({tcp.PortRangeStart}).");
        }
        else if (tcp.PortRangeStart == 0 && tcp.PortRangeEnd != 0)
        {
            failures.Add("Herald:Tcp:PortRangeStart is 0 (one ephemeral port), so Herald:Tcp:PortRangeEnd must be 0 too.");
        }
        else if (tcp.PortRangeEnd - tcp.PortRangeStart >= 1024)
        {
            failures.Add($"Herald:Tcp port range {tcp.PortRangeStart}-{tcp.PortRangeEnd} has more than 1024 ports.");
        }

        if (!TryParseHost(tcp.Host, out _))
        {
            failures.Add($"Herald:Tcp:Host '{tcp.Host}' is not an IP address, 'localhost' or 'any'.");
        }

        OtlpOptions otlp = options.Telemetry.Otlp;
        Annotations(failures, "Herald:Monitoring", options.Monitoring);
        MonitoringOptions monitoring = options.Monitoring;
        if (!TryParseHost(monitoring.Host, out _))
        {
            failures.Add($"Herald:Monitoring:Host '{monitoring.Host}' is not an IP address, 'localhost' or 'any'.");
        }

        if (monitoring.Port > 0 && (monitoring.Port == options.Http.Port || monitoring.Port == options.Policy.Port || (monitoring.Port >= tcp.PortRangeStart && monitoring.Port <= tcp.PortRangeEnd)))
        {
            failures.Add($"Herald:Monitoring:Port {monitoring.Port} is also a client port (HTTP, policy or TCP): the monitoring listener needs its own.");
        }

        Check(failures, "Herald:Monitoring:DrainDelay", options.Monitoring.DrainDelay, TimeSpan.Zero, TimeSpan.FromMinutes(5));
        Check(failures, "Herald:Telemetry:Otlp:MetricsInterval", otlp.MetricsInterval, TimeSpan.FromMilliseconds(100), TimeSpan.FromHours(1));
        if (!string.IsNullOrEmpty(otlp.Endpoint) && !(Uri.TryCreate(otlp.Endpoint, UriKind.Absolute, out Uri? endpoint) && endpoint.Scheme is "http" or "https"))
        {
            failures.Add($"Herald:Telemetry:Otlp:Endpoint '{otlp.Endpoint}' is not an absolute http:// or https:// address.");
        }

        LimitOptions limits = options.Limits;
        Check(failures, "Herald:Limits:HandshakeTimeout", limits.HandshakeTimeout, TimeSpan.FromMilliseconds(10), TimeSpan.FromMinutes(10));
        Check(failures, "Herald:Limits:PingInterval", limits.PingInterval, TimeSpan.FromMilliseconds(10), TimeSpan.FromHours(1));
        Check(failures, "Herald:Limits:ShutdownDrainTimeout", limits.ShutdownDrainTimeout, TimeSpan.Zero, TimeSpan.FromMinutes(10));
        Check(failures, "Herald:Limits:ErrorFlushTimeout", limits.ErrorFlushTimeout, TimeSpan.Zero, TimeSpan.FromMinutes(1));
        Check(failures, "Herald:Monitoring:FailureDelay", options.Monitoring.FailureDelay, TimeSpan.Zero, TimeSpan.FromHours(1));
        Check(failures, "Herald:Limits:CloseTimeout", limits.CloseTimeout, TimeSpan.FromMilliseconds(1), TimeSpan.FromMinutes(10));
        Check(failures, "Herald:Limits:FrameGracePeriod", limits.FrameGracePeriod, TimeSpan.FromMilliseconds(10), TimeSpan.FromHours(1));
        if (limits.MaxPartialFrameBytesTotal < limits.MaxFrameBytes + 4L)
        {
            failures.Add($"Herald:Limits:MaxPartialFrameBytesTotal ({limits.MaxPartialFrameBytesTotal}) must hold at least one frame of Herald:Limits:MaxFrameBytes ({limits.MaxFrameBytes}) and its prefix.");
        }

        if (limits.MaxPayloadBytes < 1)
        {
            failures.Add($"Herald:Limits:MaxFrameBytes ({limits.MaxFrameBytes}) leaves no room for a payload beside two topics of Herald:Limits:MaxTopicLength ({limits.MaxTopicLength}): it must exceed 2 × MaxTopicLength + 31.");
        }

        if (limits.MaxPendingBytes < limits.MaxFrameBytes + 16)
        {
            failures.Add($"Herald:Limits:MaxPendingBytes ({limits.MaxPendingBytes}) must hold at least one frame of Herald:Limits:MaxFrameBytes ({limits.MaxFrameBytes}).");
        }

        return failures.Count == 0 ? ValidateOptionsResult.Success : ValidateOptionsResult.Fail(failures);
    }

    private static void ValidateSecurity(List<string> failures, Security.SecurityOptions security)
    {
        Security.TlsOptions tls = security.Tls;
        if (tls.Enabled)
        {
            if (string.IsNullOrEmpty(tls.CertificatePath) || !File.Exists(tls.CertificatePath))
            {
                failures.Add($"Herald:Security:Tls is on but Herald:Security:Tls:CertificatePath '{tls.CertificatePath}' does not exist.");
            }
            else if (!string.IsNullOrEmpty(tls.KeyPath) && !File.Exists(tls.KeyPath))
            {
                failures.Add($"Herald:Security:Tls:KeyPath '{tls.KeyPath}' does not exist.");
            }

            if (!string.IsNullOrWhiteSpace(tls.TcpPorts) && tls.TcpPorts.Trim() is not ("all" or "*") && !System.Text.RegularExpressions.Regex.IsMatch(tls.TcpPorts.Trim(), @"^\d+(\s*-\s*\d+)?$"))
            {
                failures.Add($"Herald:Security:Tls:TcpPorts '{tls.TcpPorts}' must be empty, 'all', or a range like 4502-4517.");
            }

            Check(failures, "Herald:Security:Tls:HandshakeTimeout", tls.HandshakeTimeout, TimeSpan.FromMilliseconds(10), TimeSpan.FromMinutes(5));
        }

        Security.AuthOptions auth = security.Auth;
        Check(failures, "Herald:Security:Auth:FailureDelay", auth.FailureDelay, TimeSpan.Zero, TimeSpan.FromSeconds(30));
        Annotations(failures, "Herald:Security:Responses", security.Responses);
        Check(failures, "Herald:Security:Responses:Expires", security.Responses.Expires, TimeSpan.FromMilliseconds(1), TimeSpan.FromDays(1));
        if (auth.Mode == Security.AuthMode.Token)
        {
            if (auth.Tokens.Count == 0)
            {
                failures.Add("Herald:Security:Auth:Mode is Token but Herald:Security:Auth:Tokens is empty.");
            }

            foreach (Security.TokenOptions token in auth.Tokens)
            {
                if (token.Sha256.Length != 64 || !token.Sha256.All(Uri.IsHexDigit))
                {
                    failures.Add($"Herald:Security:Auth:Tokens '{token.Name}': Sha256 must be 64 hex digits (printf %s \"$TOKEN\" | sha256sum).");
                }

                Patterns(failures, token.Name, token.Permissions);
            }
        }

        if (auth.Mode == Security.AuthMode.Jwt)
        {
            Security.JwtOptions jwt = auth.Jwt;
            bool hmac = !string.IsNullOrEmpty(jwt.HmacSecret);
            int sources = (hmac ? 1 : 0) + (string.IsNullOrEmpty(jwt.PublicKeyPemFile) ? 0 : 1) + (string.IsNullOrEmpty(jwt.JwksFile) ? 0 : 1);
            if (sources != 1)
            {
                failures.Add("Herald:Security:Auth:Jwt needs exactly one of HmacSecret, PublicKeyPemFile and JwksFile.");
            }
            else if (!string.IsNullOrEmpty(jwt.JwksFile))
            {
                if (!File.Exists(jwt.JwksFile))
                {
                    failures.Add($"Herald:Security:Auth:Jwt:JwksFile '{jwt.JwksFile}' does not exist.");
                }
            }
            else if (hmac && System.Text.Encoding.UTF8.GetByteCount(jwt.HmacSecret!) < 32)
            {
                failures.Add("Herald:Security:Auth:Jwt:HmacSecret must be at least 32 bytes.");
            }
            else if (!hmac && !File.Exists(jwt.PublicKeyPemFile))
            {
                failures.Add($"Herald:Security:Auth:Jwt:PublicKeyPemFile '{jwt.PublicKeyPemFile}' does not exist.");
            }

            Check(failures, "Herald:Security:Auth:Jwt:ClockSkew", jwt.ClockSkew, TimeSpan.Zero, TimeSpan.FromHours(1));
        }
    }

    private static void Patterns(List<string> failures, string name, Security.PermissionOptions permissions)
    {
        foreach (string pattern in permissions.Publish.Concat(permissions.Subscribe).Concat(permissions.DenyPublish).Concat(permissions.DenySubscribe))
        {
            if (Herald.Protocol.Topic.ValidatePattern(System.Text.Encoding.UTF8.GetBytes(pattern), 4096) != Herald.Protocol.ErrorCode.None)
            {
                failures.Add($"Herald:Security:Auth:Tokens '{name}': '{pattern}' is not a valid topic pattern.");
            }
        }
    }

    /// <summary>
    /// Validates, throwing <see cref="OptionsValidationException"/> with every failure; with
    /// <see cref="HeraldOptions.StrictConfiguration"/>, each of <paramref name="unknown"/> is one more.
    /// </summary>
    public static void ThrowIfInvalid(HeraldOptions options, IReadOnlyList<UnknownKey> unknown)
    {
        ValidateOptionsResult result = new HeraldOptionsValidator().Validate(null, options);
        List<string> failures = result.Failed ? [.. result.Failures] : [];
        if (options.StrictConfiguration)
        {
            failures.AddRange(unknown.Select(k => $"{k.Path} is not a Herald setting{DidYouMean(k)} (Herald:StrictConfiguration is on)."));
        }

        if (failures.Count > 0)
        {
            throw new OptionsValidationException(HeraldOptions.Section, typeof(HeraldOptions), failures);
        }
    }

    /// <summary>" (did you mean Herald:Limits:MaxFrameBytes?)", or nothing when no known key is close.</summary>
    internal static string DidYouMean(UnknownKey key) => key.Closest is null ? "" : $" (did you mean {key.Closest}?)";

    private static void Annotations(List<string> failures, string section, object options)
    {
        var results = new List<ValidationResult>();
        if (!Validator.TryValidateObject(options, new ValidationContext(options), results, validateAllProperties: true))
        {
            foreach (ValidationResult r in results)
            {
                failures.Add($"{section}:{string.Join(",", r.MemberNames)}: {r.ErrorMessage}");
            }
        }
    }

    private static void ValidateApi(List<string> failures, HeraldOptions options)
    {
        Api.ApiOptions api = options.Api;
        Annotations(failures, "Herald:Api", api);
        Check(failures, "Herald:Api:IdempotencyWindow", api.IdempotencyWindow, TimeSpan.FromSeconds(1), TimeSpan.FromDays(1));
        if (!TryParseHost(api.Host, out _))
        {
            failures.Add($"Herald:Api:Host '{api.Host}' is not an IP address, 'localhost' or 'any'.");
        }

        int[] others = [options.Http.Port, options.Policy.Port, options.Monitoring.Port];
        if (api.Enabled && api.Port > 0 && (others.Contains(api.Port) || (api.Port >= options.Tcp.PortRangeStart && api.Port <= options.Tcp.PortRangeEnd)))
        {
            failures.Add($"Herald:Api:Port {api.Port} is also another listener's port (HTTP, policy, monitoring or TCP): the API listener needs its own.");
        }

        var names = new HashSet<string>(StringComparer.Ordinal);
        for (int i = 0; i < api.Keys.Count; i++)
        {
            Api.ApiKeyOptions key = api.Keys[i];
            string at = $"Herald:Api:Keys:{i}";
            if (string.IsNullOrWhiteSpace(key.Name) || !names.Add(key.Name))
            {
                failures.Add($"{at}:Name '{key.Name}' must be given and differ from every other key's.");
            }

            if (key.Hash.Length != 64 || !key.Hash.All(char.IsAsciiHexDigit))
            {
                failures.Add($"{at}:Hash must be the SHA-256 of the key as 64 hexadecimal digits (herald api hash-key), never the key itself.");
            }

            if (Api.ApiKeys.ParseScope(key.Scope, out string? error) == Api.ApiScope.None)
            {
                failures.Add($"{at}:Scope '{key.Scope}': {error}.");
            }

            if (key.RequestsPerSecond is < 0)
            {
                failures.Add($"{at}:RequestsPerSecond ({key.RequestsPerSecond}) must not be negative.");
            }
        }
    }

    private static void ValidateHistory(List<string> failures, History.HistoryOptions history, int maxTopic)
    {
        for (int i = 0; i < history.Topics.Count; i++)
        {
            History.HistoryRule rule = history.Topics[i];
            string key = $"Herald:History:Topics:{i}";
            Annotations(failures, key, rule);
            if (Topic.ValidatePattern(System.Text.Encoding.UTF8.GetBytes(rule.Pattern), maxTopic) is var error && error != ErrorCode.None)
            {
                failures.Add($"{key}:Pattern '{rule.Pattern}' is not a topic pattern: {error} (spec §5).");
            }

            Check(failures, $"{key}:MaxAge", rule.MaxAge, TimeSpan.FromSeconds(1), TimeSpan.FromDays(7));
        }
    }

    private static void ValidateCluster(List<string> failures, Cluster.ClusterOptions cluster)
    {
        Check(failures, "Herald:Cluster:ConnectTimeout", cluster.ConnectTimeout, TimeSpan.FromMilliseconds(100), TimeSpan.FromMinutes(5));
        Check(failures, "Herald:Cluster:HeartbeatInterval", cluster.HeartbeatInterval, TimeSpan.FromMilliseconds(100), TimeSpan.FromMinutes(5));
        Check(failures, "Herald:Cluster:ReplayWindow", cluster.ReplayWindow, TimeSpan.FromSeconds(1), TimeSpan.FromHours(1));
        Check(failures, "Herald:Cluster:ControlReplyTimeout", cluster.ControlReplyTimeout, TimeSpan.FromMilliseconds(100), TimeSpan.FromMinutes(1));
        CheckPrefix(failures, "Herald:Cluster:ChannelPrefix", cluster.ChannelPrefix);

        if (cluster.Secret is { Length: < 16 })
        {
            failures.Add("Herald:Cluster:Secret must be 16 characters or more (or unset: envelopes unsigned).");
        }

        if (!cluster.Enabled)
        {
            return;
        }

        if (!string.IsNullOrWhiteSpace(cluster.Redis) && cluster.Shards.Count > 0)
        {
            failures.Add("Herald:Cluster:Redis and Herald:Cluster:Shards name the cluster's Redis twice: set one (Shards for several).");
            return;
        }

        var places = new HashSet<string>(StringComparer.Ordinal);
        for (int i = 0; i < cluster.ShardList.Count; i++)
        {
            Cluster.ClusterShardOptions shard = cluster.ShardList[i];
            string key = cluster.Shards.Count > 0 ? $"Herald:Cluster:Shards:{i}:Redis" : "Herald:Cluster:Redis";
            if (string.IsNullOrWhiteSpace(shard.Redis))
            {
                failures.Add($"{key} is empty: every shard names its Redis.");
                continue;
            }

            if (Cluster.ClusterOptions.RedisProblem(shard.Redis, key) is { } problem)
            {
                failures.Add(problem);
                continue;
            }

            string prefix = shard.ChannelPrefix ?? cluster.ChannelPrefix;
            if (shard.ChannelPrefix is not null)
            {
                CheckPrefix(failures, $"Herald:Cluster:Shards:{i}:ChannelPrefix", prefix);
            }

            if (!places.Add($"{shard.Redis}\n{prefix}"))
            {
                failures.Add($"Herald:Cluster:Shards:{i} is another shard's Redis with the same prefix: shards on one Redis differ by ChannelPrefix.");
            }
        }
    }

    private static void CheckPrefix(List<string> failures, string key, string prefix)
    {
        if (prefix.Any(c => c is '*' or '?' or '[' or ']' or '\\' || c <= ' ' || c > '~'))
        {
            failures.Add($"{key} '{prefix}' must be printable ASCII without spaces or glob characters (* ? [ ] \\).");
        }

        int open = prefix.IndexOf('{', StringComparison.Ordinal);
        if (open < 0 || prefix.IndexOf('}', open + 1) is var close && (close < 0 || close == open + 1))
        {
            failures.Add($"{key} '{prefix}' must hold a Redis hash tag, such as {{herald}}: (so on Redis Cluster all of a shard's channels share one slot, in order).");
        }
    }

    internal static bool TryParseHost(string host, out IPAddress address)
    {
        switch (host)
        {
            case "localhost":
                address = IPAddress.Loopback;
                return true;
            case "any" or "*":
                address = IPAddress.Any;
                return true;
            default:
                return IPAddress.TryParse(host, out address!);
        }
    }

    /// <summary>A hook (Herald:Hooks:X): an absolute http(s) URL, its patterns valid, its timeout bounded (a connect hook's within the handshake timeout).</summary>
    private static void ValidateHook(List<string> failures, string name, Security.HookOptions hook, LimitOptions limits)
    {
        string key = $"Herald:Hooks:{name}";
        Annotations(failures, key, hook);
        if (!hook.Enabled)
        {
            return;
        }

        if (!Uri.TryCreate(hook.Url, UriKind.Absolute, out Uri? url) || url.Scheme is not ("http" or "https"))
        {
            failures.Add($"{key}:Url '{hook.Url}' must be an absolute http:// or https:// URL.");
        }

        foreach (string pattern in (hook as Security.TopicHookOptions)?.Patterns ?? [])
        {
            if (Topic.ValidatePattern(System.Text.Encoding.UTF8.GetBytes(pattern), limits.MaxTopicLength) is var error && error != ErrorCode.None)
            {
                failures.Add($"{key}:Patterns '{pattern}': {Topic.Describe(error, System.Text.Encoding.UTF8.GetBytes(pattern), limits.MaxTopicLength)}");
            }
        }

        TimeSpan most = name == "Connect" ? limits.HandshakeTimeout : TimeSpan.FromMinutes(1);
        Check(failures, $"{key}:Timeout", hook.Timeout, TimeSpan.FromMilliseconds(1), most); // a connect hook answers before the handshake times out
    }

    private static void Check(List<string> failures, string name, TimeSpan value, TimeSpan min, TimeSpan max)
    {
        if (value < min || value > max)
        {
            failures.Add($"{name} ({value}) must be between {min} and {max}.");
        }
    }
}
