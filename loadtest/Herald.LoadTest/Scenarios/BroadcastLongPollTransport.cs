using System.Buffers;
using System.Diagnostics;
using System.Net.Sockets;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
using Herald.Protocol;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>broadcast --transport longpoll</c> (protocol-spec/longpoll.md): M sessions, each created
/// (<c>POST /poll/sessions</c>), subscribed (<c>POST .../subscriptions</c>) and then polling in a loop
/// (<c>GET .../messages?ack=N</c>, binary). The publisher posts each burst's payload to
/// <c>POST /poll/publish?topic=</c> on a connection of its own. The HTTP port comes from the
/// <see cref="HeraldTarget"/>.
/// <para>
/// Each poll answer is checked against its headers: the frames are counted and must number
/// <c>Herald-Count</c>; <c>Herald-First-Sequence</c> must follow the last ack (plus <c>Herald-Dropped</c>);
/// and the next poll acks <c>Herald-First-Sequence + Herald-Count - 1</c> (longpoll §2.1), so the broker
/// can free what was delivered. At the end of a run every session is deleted (its held poll then ends
/// with 410, which is expected at that point).
/// </para>
/// </summary>
internal sealed class BroadcastLongPollTransport(BroadcastOptions options, HeraldTarget target, BroadcastMessage message, RunLog log) : IBroadcastTransport
{
    private const int MaxFrame = 1024 * 1024; // spec §9 default; a poll body holds whole frames of at most this
    private static readonly TimeSpan PublishTimeout = TimeSpan.FromSeconds(10);

    private readonly RunState _state = new();
    private readonly BroadcastChecks _checks = new();
    private readonly CancellationTokenSource _polling = new();
    private LongPollClient? _client;
    private LongPollClient? _publisherClient;
    private PollingSubscriber?[] _subscribers = [];
    private int _established;
    private int _lost;
    private volatile string? _publisherFailure;
    private string _describe = "longpoll";
    private bool _closed;

    public string Describe => _describe;

    public int Established => Volatile.Read(ref _established);

    public int Lost => Volatile.Read(ref _lost);

    public string? PublisherFailure => _publisherFailure;

    public async Task SetupAsync(int subscribers, BurstTracker tracker, Pacer pacer, CancellationToken cancellationToken)
    {
        BrokerEndpoints endpoints = await BrokerEndpoints.ResolveAsync(target.Endpoints.Host, target.HttpPort, target.HttpPort, cancellationToken);
        // one connection per held poll, plus the ones setup and teardown requests open meanwhile
        SourceAddresses sources = SourceAddresses.Plan(endpoints.Address, subscribers + (2L * pacer.Concurrency) + 16, 1, options.Sources);
        _describe = $"longpoll: {subscribers:N0} sessions on http://{endpoints.Display} from {sources.Display}, publisher posting to /poll/publish";
        _client = new LongPollClient(endpoints.Address, target.HttpPort, sources, TimeSpan.FromSeconds(10));
        _publisherClient = new LongPollClient(endpoints.Address, target.HttpPort, SourceAddresses.None, TimeSpan.FromSeconds(10));
        _subscribers = new PollingSubscriber?[subscribers];

        await pacer.ForEachAsync(subscribers, async (i, token) =>
        {
            LongPollSessionInfo session = await RetryWhenBusyAsync(() => _client.CreateSessionAsync(token), token);
            var subscriber = new PollingSubscriber(this, i, session, message, tracker, log);
            _subscribers[i] = subscriber; // deleted at the end even if subscribing fails
            await RetryWhenBusyAsync(async () =>
            {
                await _client.SubscribeAsync(session.Token, BroadcastMessage.Sid, message.Topic, token);
                return true;
            }, token);
            subscriber.Start(_client, _polling.Token);
            Interlocked.Increment(ref _established);
        }, cancellationToken);
    }

    public async Task PublishAsync(int burst, CancellationToken cancellationToken)
    {
        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        timeout.CancelAfter(PublishTimeout);
        try
        {
            await _publisherClient!.PublishAsync(message.Topic, message.PayloadFor(burst), timeout.Token);
        }
        catch (Exception e) when (e is HttpRequestException or LongPollException or IOException
            || (e is OperationCanceledException && !cancellationToken.IsCancellationRequested))
        {
            _publisherFailure ??= e is OperationCanceledException ? $"publish not answered within {PublishTimeout.TotalSeconds:F0} s" : $"publish failed: {e.Message}";
            throw new IOException(_publisherFailure, e);
        }
    }

    public BroadcastChecks Checks()
    {
        BroadcastChecks checks = BroadcastSubscriber.Sum(_subscribers);
        foreach (KeyValuePair<string, long> counter in _checks.Values)
        {
            checks.Add(counter.Key, counter.Value);
        }

        checks.Add("connectionsOpened", (_client?.ConnectionsOpened ?? 0) + (_publisherClient?.ConnectionsOpened ?? 0));
        return checks;
    }

    /// <summary>
    /// Deletes every session (bounded concurrency, within <paramref name="timeout"/>); each held poll then
    /// ends with 410. Polls still running after that are cancelled, and the connections closed.
    /// </summary>
    public async Task CloseAsync(TimeSpan timeout)
    {
        if (_closed)
        {
            return;
        }

        _closed = true;
        _state.BeginStopping();
        long start = Stopwatch.GetTimestamp();
        if (_client is { } client)
        {
            using var deleting = new CancellationTokenSource(timeout);
            try
            {
                var parallel = new ParallelOptions { MaxDegreeOfParallelism = Math.Max(16, options.ConnectConcurrency), CancellationToken = deleting.Token };
                await Parallel.ForEachAsync(_subscribers.Where(s => s is not null), parallel, async (s, token) =>
                {
                    try
                    {
                        int status = await client.DeleteSessionAsync(s!.Session, token);
                        if (status is not (204 or 404 or 410))
                        {
                            Count("deleteFailures", $"DELETE session: HTTP {status}");
                        }
                    }
                    catch (Exception e) when (e is HttpRequestException or IOException or SocketException)
                    {
                        Count("deleteFailures", $"DELETE session: {e.Message}");
                    }
                });
            }
            catch (OperationCanceledException)
            {
                Count("deleteFailures", $"not every session was deleted within {timeout.TotalSeconds:F0} s; the broker expires the rest after its inactivity timeout");
            }
        }

        TimeSpan left = timeout - Stopwatch.GetElapsedTime(start);
        Task polls = Task.WhenAll(_subscribers.Where(s => s is not null).Select(s => s!.Polling));
        await RunState.WaitQuietlyAsync(polls, left > TimeSpan.FromSeconds(1) ? TimeSpan.FromSeconds(Math.Min(5, left.TotalSeconds)) : TimeSpan.FromSeconds(1));
        await _polling.CancelAsync();
        await RunState.WaitQuietlyAsync(polls, TimeSpan.FromSeconds(2));
        _client?.Dispose();
        _publisherClient?.Dispose();
    }

    public async ValueTask DisposeAsync()
    {
        await CloseAsync(TimeSpan.FromSeconds(5));
        _polling.Dispose();
    }

    private void Count(string counter, string? what = null, string who = "longpoll")
    {
        _checks.Add(counter, 1);
        if (what is not null)
        {
            log.Report(who, what);
        }
    }

    /// <summary>Runs <paramref name="call"/>, retrying while the broker answers 503 (over capacity) after its Retry-After.</summary>
    private async Task<T> RetryWhenBusyAsync<T>(Func<Task<T>> call, CancellationToken cancellationToken)
    {
        while (true)
        {
            try
            {
                return await call();
            }
            catch (LongPollException e) when (e.Retryable)
            {
                Count("setupRetries");
                await Task.Delay(e.RetryAfter is { } after && after > TimeSpan.Zero ? TimeSpan.FromSeconds(Math.Min(after.TotalSeconds, 5)) : TimeSpan.FromMilliseconds(200), cancellationToken);
            }
        }
    }

    /// <summary>One session and its polling loop (the only writer of its counters).</summary>
    private sealed class PollingSubscriber(BroadcastLongPollTransport owner, int index, LongPollSessionInfo session, BroadcastMessage message, BurstTracker tracker, RunLog log)
        : BroadcastSubscriber($"session-{index}", message, tracker, log)
    {
        public string Session => session.Token;

        public Task Polling { get; private set; } = Task.CompletedTask;

        public void Start(LongPollClient client, CancellationToken stop) => Polling = PollAsync(client, stop);

        private async Task PollAsync(LongPollClient client, CancellationToken stop)
        {
            await Task.Yield(); // hand the setup loop back at once
            long ack = 0;
            int failuresInARow = 0;
            while (!stop.IsCancellationRequested)
            {
                PollResult result;
                try
                {
                    result = await client.PollAsync(session.Token, ack, stop);
                }
                catch (OperationCanceledException) when (stop.IsCancellationRequested)
                {
                    return;
                }
                catch (Exception e) when (e is HttpRequestException or IOException or SocketException or OperationCanceledException)
                {
                    if (owner._state.Stopping)
                    {
                        return;
                    }

                    owner.Count("transportErrors", $"poll failed: {e.Message}", Name);
                    if (!await BackOffAsync(++failuresInARow, null, stop))
                    {
                        return;
                    }

                    continue;
                }

                switch (result.Status)
                {
                    case 200:
                        failuresInARow = 0;
                        try
                        {
                            ack = Handle(result, ack);
                        }
                        finally
                        {
                            result.Release();
                        }

                        break;
                    case 404 or 410:
                        if (!owner._state.Stopping)
                        {
                            LostReason ??= $"HTTP {result.Status}: {result.Problem}";
                            Interlocked.Increment(ref owner._lost);
                            owner.Count("sessionsLost", $"session lost: HTTP {result.Status} {result.Problem}", Name);
                        }

                        return;
                    case 409:
                        // a newer poll on this session replaced this one: only possible after a poll we gave up on
                        owner.Count("pollReplaced", $"HTTP 409: {result.Problem}", Name);
                        break;
                    default:
                        if (owner._state.Stopping)
                        {
                            return;
                        }

                        owner.Count(result.Status >= 500 ? "http5xx" : "http4xx", $"poll: HTTP {result.Status} {result.Problem}", Name);
                        if (!await BackOffAsync(++failuresInARow, result.RetryAfter, stop))
                        {
                            return;
                        }

                        break;
                }
            }
        }

        /// <summary>Counts and checks one 200 answer; returns the ack for the next poll.</summary>
        private long Handle(PollResult result, long ack)
        {
            owner._checks.Add(result.Count > 0 ? "pollsWithMessages" : "emptyPolls", 1);
            if (result.Count <= 0)
            {
                if (result.Length > 0 || result.Count < 0)
                {
                    owner.Count("headerMismatches", $"empty poll with Herald-Count {result.Count} and {result.Length} body bytes", Name);
                }

                return ack;
            }

            long dropped = Math.Max(0, result.Dropped);
            if (dropped > 0)
            {
                owner._checks.Add("droppedAnnounced", dropped);
                owner.Count("droppedPolls", $"Herald-Dropped: {dropped}", Name);
            }

            if (result.FirstSequence != ack + 1 + dropped)
            {
                owner.Count("headerMismatches", $"Herald-First-Sequence {result.FirstSequence} after ack {ack} (Herald-Dropped {dropped})", Name);
            }

            long now = Stopwatch.GetTimestamp();
            var body = new ReadOnlySequence<byte>(result.Body);
            long frames = 0;
            try
            {
                while (FrameReader.TryReadFrame(ref body, MaxFrame, out ReadOnlySequence<byte> frame))
                {
                    frames++;
                    if (!TryHandleMessage(frame, now))
                    {
                        Unexpected++;
                    }
                }

                if (!body.IsEmpty)
                {
                    owner.Count("malformedBodies", $"poll body ends with {body.Length} bytes of an incomplete frame", Name);
                }
            }
            catch (ProtocolException e)
            {
                owner.Count("malformedBodies", $"poll body: {e.Message}", Name);
            }

            if (frames != result.Count)
            {
                owner.Count("countMismatches", $"{frames} frames in a body with Herald-Count {result.Count}", Name);
            }

            return result.FirstSequence + result.Count - 1;
        }

        private static async Task<bool> BackOffAsync(int failuresInARow, TimeSpan? retryAfter, CancellationToken stop)
        {
            TimeSpan delay = retryAfter is { } after && after > TimeSpan.Zero
                ? TimeSpan.FromSeconds(Math.Min(after.TotalSeconds, 5))
                : TimeSpan.FromMilliseconds(Math.Min(2000, 50 << Math.Min(failuresInARow, 6)));
            try
            {
                await Task.Delay(delay, stop);
                return true;
            }
            catch (OperationCanceledException)
            {
                return false;
            }
        }
    }
}
