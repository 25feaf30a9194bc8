using System.Net;
using Herald.Broker.Delivery;
using Herald.Broker.Sessions;
using Herald.Broker.Telemetry;
using Herald.Protocol;
using Microsoft.AspNetCore.Http;

namespace Herald.Broker.Transports.Sse;

/// <summary>
/// A Server-Sent Events stream (protocol-spec/sse.md): the <see cref="ProtocolSession"/> of a receive-only
/// client. Its subscriptions are made from the URL before the response starts; then the same
/// <see cref="PipeDrain{TFormat}"/> TCP runs writes its backlog into the response, as events
/// (<see cref="SseFormat"/>), until the client leaves or the broker ends the stream (the last event says why).
/// </summary>
/// <remarks>
/// Threading: the request's handler makes the subscriptions, as the session's one caller, before the drain is
/// attached; afterwards nothing but the router, the sweeper (heartbeats, credential expiry) and a close touch it.
/// </remarks>
internal sealed class SseSession : ProtocolSession
{
    public const string TransportName = "sse";

    private readonly SseOptions _options;
    private readonly TaskCompletionSource _closed = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private long _lastBeat;
    private volatile bool _streaming;

    public SseSession(BrokerCore broker, long id, EndPoint? remoteEndPoint, SseOptions options)
        : base(broker, id, TransportName, remoteEndPoint, new BacklogLimits(broker.Limits.MaxPendingMessages, broker.Limits.MaxPendingBytes, broker.Limits.SlowConsumerPolicy))
    {
        _options = options;
    }

    /// <summary>The subscriptions made, the status MESSAGEs of resumes queued: they wait in the backlog until <see cref="StreamAsync"/>.</summary>
    public void SubscriptionsMade() => FlushTouched();

    /// <summary>A stream refused before it started: its subscriptions end and what was queued is dropped.</summary>
    public void Discard()
    {
        Close(ErrorCode.None, "Refused before it started.");
        EndSubscriptions();
        Backlog.Abandon();
    }

    /// <summary>
    /// Writes the backlog into <paramref name="response"/> (already started) until the client leaves
    /// (<paramref name="aborted"/>) or the broker closes the session; then the closing sequence: on shutdown
    /// what is queued is delivered first (spec §6.4), on an error the client is told at once.
    /// </summary>
    public async Task StreamAsync(HttpContext context, SseFormat format)
    {
        _ = new PipeDrain<SseFormat>(Backlog, context.Response.BodyWriter, TransportName, Broker.Metrics, format);
        Volatile.Write(ref _lastBeat, Environment.TickCount64);
        _streaming = true;
        Backlog.ScheduleFlush(); // what was queued while subscribing
        using (context.RequestAborted.Register(static s => ((SseSession)s!).Close(ErrorCode.None, "Closed by the client."), this))
        {
            await _closed.Task.ConfigureAwait(false);
        }

        ErrorCode code = CloseCode;
        EndSubscriptions(reason: code == ErrorCode.AuthenticationFailed ? Engines.PresenceReason.Expired : Engines.PresenceReason.Disconnect); // spec §15.2
        if (code == ErrorCode.None)
        {
            Backlog.Abandon(); // the client left: nobody to write to
            Broker.Log.ClosedByClient(Id, RemoteEndPoint);
            return;
        }

        string reason = CloseReason ?? code.ToString();
        Broker.Log.ClosedByBroker(Id, RemoteEndPoint, code, reason);
        if (code != ErrorCode.ShuttingDown)
        {
            Broker.Metrics.ProtocolError(code);
        }

        if (!await SayLastWordsAsync(code, SseFormat.Error(code, reason)).ConfigureAwait(false))
        {
            context.Abort(); // the client did not take its last events in time
        }
    }

    /// <summary>A subscription the server made (spec §4.10), told as <c>event: subscribed</c> (sse.md §2) before its messages.</summary>
    protected override void ServerSubscribed(uint sid, string pattern, SubscribeOptions options) =>
        ControlNow(SseFormat.Notice("subscribed"u8, sid, pattern, "options"u8, null, (uint)options));

    /// <summary>A subscription the server ended, told as <c>event: unsubscribed</c> (sse.md §2) with the backend's reason.</summary>
    protected override void ServerUnsubscribed(uint sid, string pattern, string reason) =>
        ControlNow(SseFormat.Notice("unsubscribed"u8, sid, pattern, "message"u8, reason, 0));

    /// <inheritdoc/>
    protected override void OnClose(ErrorCode code, string reason) => _closed.TrySetResult();

    /// <summary>A comment line every <see cref="SseOptions.HeartbeatInterval"/>: proxies keep the stream open, and a write to a client that is gone fails.</summary>
    protected override void CheckTransportLiveness(long now)
    {
        if (!_streaming || IsClosing || now - Volatile.Read(ref _lastBeat) < (long)_options.HeartbeatInterval.TotalMilliseconds)
        {
            return;
        }

        Volatile.Write(ref _lastBeat, now);
        ControlNow(SseFormat.Heartbeat());
    }
}
