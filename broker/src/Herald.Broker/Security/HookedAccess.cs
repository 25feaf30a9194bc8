using System.Buffers;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Herald.Protocol;

namespace Herald.Broker.Security;

/// <summary>
/// The access decisions with the application's backend asked where <c>Herald:Hooks</c> configures a hook
/// (protocol-spec/hooks.md): the connect hook names the identity of a credential, the subscribe and publish hooks allow
/// or refuse what the identity's permissions allow, on the topics their patterns reach. Everything else, and a failed
/// call under the <c>Allow</c> policy, is decided by the <see cref="LocalAccess"/> it wraps.
/// </summary>
internal sealed class HookedAccess : IAccessDecisions, IDisposable
{
    /// <summary>The longest identity name a connect hook may give.</summary>
    public const int MaxIdentityLength = 256;

    private readonly LocalAccess _local;
    private readonly Authenticator _authenticator;
    private readonly BackendHook? _connect;
    private readonly BackendHook? _subscribe;
    private readonly BackendHook? _publish;
    private readonly PublishHookOptions _publishOptions;

    public HookedAccess(LocalAccess local, Authenticator authenticator, HooksOptions options, Func<string, HookOptions, BackendHook> hook)
    {
        _local = local;
        _authenticator = authenticator;
        _connect = options.Connect.Enabled ? hook("connect", options.Connect) : null;
        _subscribe = options.Subscribe.Enabled ? hook("subscribe", options.Subscribe) : null;
        _publish = options.Publish.Enabled ? hook("publish", options.Publish) : null;
        _publishOptions = options.Publish;
    }

    public bool DecidesConnections => _connect is not null;

    public bool DecidesSubscriptions => _subscribe is not null;

    public bool DecidesPublications => _publish is not null;

    public bool DecidesSubscription(string pattern) => _subscribe?.Reaches(pattern) == true;

    public bool DecidesPublication(ReadOnlySpan<char> topic) => _publish?.Matches(topic) == true;

    public ValueTask<Verdict> ConnectAsync(ConnectQuestion question)
    {
        if (_connect is null)
        {
            return _local.ConnectAsync(question);
        }

        byte[] body = JsonSerializer.SerializeToUtf8Bytes(
            new ConnectHookRequest(question.Credential, question.Transport, question.Remote?.ToString(), question.ClientName, question.Info), HookJsonContext.Default.ConnectHookRequest);
        string key = Convert.ToHexString(SHA256.HashData(Encoding.UTF8.GetBytes(question.Credential ?? "")));
        ValueTask<Verdict> asked = _connect.AskAsync(key, body, ReadConnect);
        return asked.IsCompletedSuccessfully ? new(Connected(asked.Result, question)) : ConnectedAsync(asked, question);
    }

    private async ValueTask<Verdict> ConnectedAsync(ValueTask<Verdict> asked, ConnectQuestion question) => Connected(await asked.ConfigureAwait(false), question);

    /// <summary>A failed call under the <c>Allow</c> policy leaves the connection to the configured authentication.</summary>
    private Verdict Connected(Verdict verdict, ConnectQuestion question) =>
        verdict.Kind == VerdictKind.Allow && verdict.Identity is null ? _local.Connect(question) : verdict;

    /// <summary>The connect hook's answer (hooks.md §2); null when it is not one.</summary>
    private Verdict? ReadConnect(byte[] answer)
    {
        ConnectHookResponse? response = JsonSerializer.Deserialize(answer, HookJsonContext.Default.ConnectHookResponse);
        switch (response?.Result)
        {
            case "refuse":
                return new Verdict(VerdictKind.Refuse, response.Reason, CacheSeconds: response.CacheSeconds ?? 0);
            case "allow" when response.Identity is { Length: > 0 and <= MaxIdentityLength } name:
                DateTimeOffset? expires = response.ExpiresAt is { } at ? DateTimeOffset.FromUnixTimeSeconds(Math.Clamp(at, 0, 253_402_300_799)) : null;
                return new Verdict(VerdictKind.Allow, Identity: _authenticator.IdentityOf(name, response.Permissions, expires, response.Info), CacheSeconds: response.CacheSeconds ?? 0);
            default:
                return null;
        }
    }

    public ValueTask<Verdict> SubscribeAsync(Identity identity, string pattern, string transport, string client)
    {
        if (_subscribe is null || !_subscribe.Reaches(pattern))
        {
            return _local.SubscribeAsync(identity, pattern, transport, client);
        }

        byte[] body = JsonSerializer.SerializeToUtf8Bytes(new SubscribeHookRequest(identity.Name, pattern, transport, client), HookJsonContext.Default.SubscribeHookRequest);
        return _subscribe.AskAsync(identity.Name + "\n" + pattern, body, ReadDecision);
    }

    public ValueTask<Verdict> PublishAsync(Identity identity, string topic, in PublishFrame publish, string transport, string client)
    {
        if (_publish is null || !_publish.Matches(topic))
        {
            return _local.PublishAsync(identity, topic, publish, transport, client);
        }

        Dictionary<string, string[]>? headers = null;
        string? traceParent = null;
        if (publish.HasHeaders)
        {
            headers = [];
            foreach ((string name, string[] values) in HeaderBlock.Read(publish.Headers))
            {
                headers[name] = values;
                if (name == "traceparent" && values.Length > 0)
                {
                    traceParent = values[0];
                }
            }
        }

        bool include = _publishOptions.IncludePayload && (publish.Flags & PayloadFlags.Zstd) == 0 && publish.Payload.Length <= _publishOptions.MaxPayloadBytes;
        string? payload = include ? Convert.ToBase64String(publish.Payload.ToArray()) : null;
        var request = new PublishHookRequest(identity.Name, topic, transport, client, (int)publish.Payload.Length, headers, payload, _publishOptions.IncludePayload && !include ? true : null);
        byte[] body = JsonSerializer.SerializeToUtf8Bytes(request, HookJsonContext.Default.PublishHookRequest);
        return _publish.AskAsync(identity.Name + "\n" + topic, body, ReadDecision, traceParent);
    }

    /// <summary>The subscribe or publish hook's answer (hooks.md §3, §4); null when it is not one.</summary>
    private static Verdict? ReadDecision(byte[] answer)
    {
        DecisionHookResponse? response = JsonSerializer.Deserialize(answer, HookJsonContext.Default.DecisionHookResponse);
        return response?.Result switch
        {
            "allow" => response.CacheSeconds is > 0 ? Verdict.Allowed with { CacheSeconds = response.CacheSeconds.Value } : Verdict.Allowed,
            "refuse" => new Verdict(VerdictKind.Refuse, response.Reason, CacheSeconds: response.CacheSeconds ?? 0),
            _ => null,
        };
    }

    public void Dispose()
    {
        _connect?.Dispose();
        _subscribe?.Dispose();
        _publish?.Dispose();
    }
}
