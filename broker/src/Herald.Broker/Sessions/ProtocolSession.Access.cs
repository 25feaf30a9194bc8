using System.Buffers;
using System.Net;
using Herald.Broker.Security;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Sessions;

/// <summary>
/// The access decisions the application's backend may take (<see cref="BrokerCore.Access"/>, protocol-spec/hooks.md): a
/// credential's identity at HELLO, a SUBSCRIBE, a PUBLISH. A decision that is not ready leaves the operation undone and
/// says so (<see cref="Deciding"/>); the transport awaits it (<see cref="DecidedAsync"/>), reading nothing more from the
/// client meanwhile, and then carries the same operation out again, which takes the answer: so a publisher's later
/// publication is never routed before an earlier one whose decision is pending, and no transport holds a rule of its own.
/// </summary>
/// <remarks>
/// Threading: the session's one caller. The answers asked for the operation being carried out stay until it completes
/// (a body of several publications asks for each of its topics at once), then are dropped: a later operation asks again
/// (or finds the hook's cache).
/// </remarks>
internal abstract partial class ProtocolSession
{
    // The answers asked for the operation being carried out, by key (its topic, pattern or credential); null: none.
    private List<KeyValuePair<string, Task<Verdict>>>? _asked;
    private Task? _deciding;

    /// <summary>Set when the last operation waits for the backend and did nothing: await <see cref="DecidedAsync"/>, then call it again.</summary>
    public bool Deciding => _deciding is not null;

    /// <summary>Completes when every answer the last operation asked for is in (each bounded by its hook's timeout). Caller: the transport.</summary>
    public async Task DecidedAsync()
    {
        if (_deciding is { } deciding)
        {
            await deciding.ConfigureAwait(false);
            _deciding = null;
        }
    }

    /// <summary>
    /// For a transport that may wait (HTTP): carries <paramref name="operation"/> out, and again once the backend has
    /// answered, for as long as it waits for one. Caller: the session's one caller.
    /// </summary>
    public async ValueTask<Refusal> DecidedAsync(Func<Refusal> operation, CancellationToken cancellation)
    {
        Refusal answer = operation();
        while (Deciding)
        {
            try
            {
                await DecidedAsync().WaitAsync(cancellation).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                ForgetAsked(); // the client left: nothing of the operation was done
                throw;
            }

            answer = operation();
        }

        return answer;
    }

    /// <summary>
    /// The answer for <paramref name="key"/>: one already asked for this operation, or one the decision gives at once; false
    /// when it is being asked (<see cref="Deciding"/> set).
    /// </summary>
    private bool TryDecision(string key, Func<ValueTask<Verdict>> ask, out Verdict verdict)
    {
        if (_asked is not null)
        {
            foreach ((string asked, Task<Verdict> answer) in _asked)
            {
                if (asked == key)
                {
                    return Taken(answer, out verdict);
                }
            }
        }

        ValueTask<Verdict> now = ask();
        if (now.IsCompletedSuccessfully)
        {
            verdict = now.Result;
            return true;
        }

        Task<Verdict> later = now.AsTask();
        (_asked ??= []).Add(new(key, later));
        return Taken(later, out verdict);
    }

    private bool Taken(Task<Verdict> answer, out Verdict verdict)
    {
        if (answer.IsCompletedSuccessfully)
        {
            verdict = answer.Result;
            return true;
        }

        _deciding = _deciding is { IsCompleted: false } earlier ? Task.WhenAll(earlier, answer) : answer;
        verdict = Verdict.Allowed;
        return false;
    }

    /// <summary>The operation is carried out (or refused): its answers are not kept for the next one.</summary>
    private void ForgetAsked()
    {
        _asked = null;
        _deciding = null;
    }

    /// <summary>
    /// HELLO's credential (or a refreshing one) through the access decisions: the identity, or null while the backend is
    /// asked. A refusal is the fatal AuthenticationFailed (why goes to the log, never the credential); a connect hook that
    /// did not decide under the <c>Refuse</c> policy is the fatal HookUnavailable.
    /// </summary>
    protected Identity? Authenticated(string? credential, string? clientName, string? info)
    {
        var question = new ConnectQuestion(credential, Transport, RemoteEndPoint, clientName, info);
        if (!TryDecision(credential ?? "", () => Broker.Access.ConnectAsync(question), out Verdict verdict))
        {
            return null;
        }

        ForgetAsked();
        return IdentityOf(Broker, verdict, RemoteEndPoint, Transport);
    }

    /// <summary>A connect decision's identity; a refusal, a hook's failure or a revoked identity thrown as its fatal error (spec §8).</summary>
    public static Identity IdentityOf(BrokerCore broker, Verdict verdict, EndPoint? remote, string transport)
    {
        switch (verdict.Kind)
        {
            case VerdictKind.Allow when verdict.Identity is { } identity:
                if (broker.Revocations.Find(identity.Name) is { } revocation)
                {
                    broker.Log.ClientRevoked(transport, remote, identity.Name, revocation.Until);
                    throw new ProtocolException(ErrorCode.Revoked, revocation.Message); // a good credential, revoked by the backend: said so, until when
                }

                return identity;
            case VerdictKind.Unavailable:
                broker.Metrics.ProtocolError(ErrorCode.HookUnavailable);
                throw new ProtocolException(ErrorCode.HookUnavailable, verdict.Reason ?? "The application's backend did not decide; try again later.");
            default:
                broker.Log.AuthenticationFailed(transport, remote, verdict.Reason ?? "The connect hook refused the credential.");
                throw new ProtocolException(ErrorCode.AuthenticationFailed, AuthenticationFailedMessage);
        }
    }

    /// <summary>
    /// A SUBSCRIBE the identity's permissions allow, to a pattern a subscribe hook reaches: true when the operation stops
    /// here, refused (<paramref name="refused"/>) or waiting for the backend (<see cref="Deciding"/>, nothing done).
    /// </summary>
    private bool SubscribeWaitsOrRefused(uint sid, in ReadOnlySequence<byte> pattern, out Refusal refused)
    {
        refused = default;
        string checkedPattern = CheckSubscribe(sid, pattern); // a broken one is refused as the operation refuses it
        if (!Broker.Access.DecidesSubscription(checkedPattern) || !Identity.Permissions.CanSubscribe(checkedPattern))
        {
            return false; // the permissions refuse it, or no hook decides it
        }

        Identity identity = Identity;
        if (!TryDecision(checkedPattern, () => Broker.Access.SubscribeAsync(identity, checkedPattern, Transport, PresenceClient), out Verdict verdict))
        {
            return true;
        }

        ForgetAsked();
        refused = RefusalOf(verdict, $"Subscribing to '{checkedPattern}'", sid);
        return !refused.IsNone;
    }

    /// <summary>
    /// A PUBLISH its checks passed, to a topic a publish hook matches: true when it stops here, refused or waiting for
    /// the backend. <paramref name="batch"/>: one of a body's publications, whose answers are kept until the body is done.
    /// </summary>
    private bool PublishWaitsOrRefused(in PublishFrame publish, bool batch, out Refusal refused)
    {
        refused = default;
        Span<char> stack = stackalloc char[Routing.TopicChars.StackLength];
        using (var name = new Routing.TopicChars(publish.Topic, stack))
        {
            if (!Broker.Access.DecidesPublication(name.Span))
            {
                return false;
            }
        }

        string topic = publish.TopicString;
        Identity identity = Identity;
        PublishFrame frame = publish;
        if (!TryDecision(topic, () => Broker.Access.PublishAsync(identity, topic, frame, Transport, PresenceClient), out Verdict verdict))
        {
            return true;
        }

        if (!batch)
        {
            ForgetAsked();
        }

        refused = RefusalOf(verdict, $"Publishing to '{topic}'", sid: 0);
        return !refused.IsNone;
    }

    /// <summary>The most of a backend's reason a client is told.</summary>
    private const int MaxReasonLength = 256;

    /// <summary>A backend's decision as the client is told it: a refusal is PermissionDenied with its reason, a failure HookUnavailable.</summary>
    private Refusal RefusalOf(Verdict verdict, string what, uint sid) => verdict.Kind switch
    {
        VerdictKind.Refuse => Denied($"{what} is not permitted for '{Identity.Name}' by the application's backend{(verdict.Reason is { Length: > 0 } why ? $": {why[..Math.Min(why.Length, MaxReasonLength)]}" : ".")}"),
        VerdictKind.Unavailable => Refuse(ErrorCode.HookUnavailable, $"{what}: {verdict.Reason}") with { Sid = sid },
        _ => default,
    };
}
