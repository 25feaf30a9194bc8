using System.Buffers;
using System.Diagnostics;
using Herald.LoadTest.Client;
using Herald.LoadTest.Reporting;
using Herald.LoadTest.Targets;
using Herald.Protocol;
using MessagePack;

namespace Herald.LoadTest.Scenarios;

/// <summary>
/// <c>broadcast --transport tcp</c>: M subscriber connections spread round-robin over the broker's port
/// range (connection <c>i</c> to port <c>first + i % ports</c>) and over source addresses
/// (<see cref="SourceAddresses"/>; connection <c>i</c> from address <c>(i / ports) % sources</c>), so each
/// (source, destination) pair carries about M / (ports x sources) connections. Each one does
/// HELLO/WELCOME, SUBSCRIBE and a PING/PONG barrier (the subscription is live), then reads. One publisher
/// connection on <c>--port</c> sends one PUBLISH per burst.
/// <para>
/// Memory per subscriber is kept small for hundreds of thousands of them: a receive buffer of a few
/// MESSAGEs (it grows if a bigger frame comes) instead of the 64 KiB the other scenarios use.
/// </para>
/// </summary>
internal sealed class BroadcastTcpTransport(BroadcastOptions options, HeraldTarget target, BroadcastMessage message, RunLog log) : IBroadcastTransport
{
    private readonly RunState _state = new();
    private readonly BroadcastChecks _checks = new();
    private readonly byte[] _publish = (byte[])message.PublishFrame.Clone();
    private TcpSubscriber?[] _subscribers = [];
    private Task[] _readers = [];
    private HeraldConnection? _publisher;
    private Task? _publisherReader;
    private int _established;
    private volatile string? _publisherFailure;
    private string _describe = "tcp";

    public string Describe => _describe;

    public int Established => Volatile.Read(ref _established);

    public int Lost => _subscribers.Count(s => s is { LostReason: not null });

    public string? PublisherFailure => _publisherFailure;

    public async Task SetupAsync(int subscribers, BurstTracker tracker, Pacer pacer, CancellationToken cancellationToken)
    {
        BrokerEndpoints endpoints = target.Endpoints;
        SourceAddresses sources = SourceAddresses.Plan(endpoints.Address, subscribers + 1L, endpoints.PortCount, options.Sources);
        _describe = $"tcp: {subscribers:N0} subscribers on {endpoints.Display} from {sources.Display}, publisher on {endpoints.Host}:{endpoints.FirstPort}";
        int receiveBuffer = Math.Clamp(4 * message.MessageFrameLength, 1024, HeraldConnection.DefaultReceiveBufferSize);

        _subscribers = new TcpSubscriber?[subscribers];
        _readers = new Task[subscribers];
        Array.Fill(_readers, Task.CompletedTask);
        await pacer.ForEachAsync(subscribers, async (i, token) =>
        {
            HeraldConnection connection = await HeraldConnection.ConnectAsync(
                endpoints.For(i), $"loadtest-broadcast-{i}", token, receiveBuffer, sources.For(i / endpoints.PortCount));
            var subscriber = new TcpSubscriber(connection, message, tracker, log);
            _subscribers[i] = subscriber;
            await connection.SubscribeAsync(BroadcastMessage.Sid, message.Topic, token);
            _readers[i] = subscriber.RunAsync(_state); // reads (and answers the broker's PINGs) from now on
            Interlocked.Increment(ref _established);
        }, cancellationToken);

        _publisher = await HeraldConnection.ConnectAsync(endpoints.At(endpoints.FirstPort), "loadtest-broadcast-pub", cancellationToken, localAddress: sources.For(0));
        _publisherReader = ReadPublisherAsync(_publisher);
    }

    public async Task PublishAsync(int burst, CancellationToken cancellationToken)
    {
        message.StampPublish(_publish, burst);
        try
        {
            await _publisher!.SendAsync(_publish, CancellationToken.None); // never cancelled midway: a half-sent frame breaks the stream
        }
        catch (Exception e) when (RunState.IsConnectionEnd(e))
        {
            _publisherFailure ??= $"send failed: {e.Message}";
            throw;
        }
    }

    public BroadcastChecks Checks()
    {
        long disconnected = 0, errorFrames = 0, gaps = 0, duplicates = 0, unexpected = 0, messages = 0, bytes = 0;
        foreach (TcpSubscriber? s in _subscribers)
        {
            if (s is null)
            {
                continue;
            }

            disconnected += s.LostReason is null ? 0 : 1;
            errorFrames += s.ErrorFrames;
            gaps += s.Gaps;
            duplicates += s.Duplicates;
            unexpected += s.Unexpected;
            messages += s.Messages;
            bytes += s.BytesReceived;
        }

        var checks = new BroadcastChecks();
        checks.Add("messagesReceived", messages);
        checks.Add("subscriberBytesReceived", bytes);
        checks.Add("disconnected", disconnected);
        checks.Add("errorFrames", errorFrames + _checks.Get("errorFrames"));
        checks.Add("sequenceGaps", gaps);
        checks.Add("duplicates", duplicates);
        checks.Add("unexpectedFrames", unexpected + _checks.Get("unexpectedFrames"));
        return checks;
    }

    public async Task CloseAsync(TimeSpan timeout)
    {
        _state.BeginStopping();
        foreach (TcpSubscriber? s in _subscribers)
        {
            s?.Connection.Close();
        }

        _publisher?.Close();
        await RunState.WaitQuietlyAsync(Task.WhenAll([.. _readers, _publisherReader ?? Task.CompletedTask]), timeout);
    }

    public async ValueTask DisposeAsync() => await CloseAsync(TimeSpan.FromSeconds(2));

    /// <summary>Answers the broker's PINGs on the publisher connection and reports its ERRORs.</summary>
    private async Task ReadPublisherAsync(HeraldConnection connection)
    {
        try
        {
            while (true)
            {
                bool pongDue = false;
                while (connection.TryReadFrame(out ReadOnlySequence<byte> frame))
                {
                    var reader = new MessagePackReader(frame);
                    switch (FrameDecoder.ReadHeader(ref reader, out int elements))
                    {
                        case FrameType.Ping:
                            pongDue = true;
                            break;
                        case FrameType.Pong:
                            break;
                        case FrameType.Error:
                            ErrorFrame error = FrameDecoder.ReadError(ref reader, elements);
                            _checks.Add("errorFrames", 1);
                            log.Report(connection.Name, BrokerErrorException.Describe(error));
                            if (error.Fatal)
                            {
                                _publisherFailure ??= BrokerErrorException.Describe(error);
                            }

                            break;
                        case FrameType type:
                            _checks.Add("unexpectedFrames", 1);
                            log.Report(connection.Name, $"unexpected {type} frame");
                            break;
                    }
                }

                if (pongDue)
                {
                    await connection.SendPongAsync();
                }

                if (!await connection.ReceiveAsync())
                {
                    if (!_state.Stopping)
                    {
                        _publisherFailure ??= "the broker closed the publisher connection";
                        log.Report(connection.Name, "disconnected: the broker closed the connection");
                    }

                    return;
                }
            }
        }
        catch (Exception e) when (RunState.IsConnectionEnd(e) || e is ProtocolException)
        {
            if (!_state.Stopping)
            {
                _publisherFailure ??= e.Message;
                log.Report(connection.Name, $"disconnected: {e.Message}");
            }
        }
    }

    /// <summary>One subscriber connection and its reading task (the only writer of its counters).</summary>
    private sealed class TcpSubscriber(HeraldConnection connection, BroadcastMessage message, BurstTracker tracker, RunLog log)
        : BroadcastSubscriber(connection.Name, message, tracker, log)
    {
        public HeraldConnection Connection => connection;

        public long ErrorFrames { get; private set; }

        public long BytesReceived => connection.BytesReceived;

        public async Task RunAsync(RunState state)
        {
            await Task.Yield(); // return to the setup loop at once; read from here on
            try
            {
                while (true)
                {
                    if (Drain())
                    {
                        await connection.SendPongAsync();
                    }

                    if (!await connection.ReceiveAsync())
                    {
                        Lose(state, "the broker closed the connection");
                        return;
                    }
                }
            }
            catch (Exception e) when (RunState.IsConnectionEnd(e) || e is ProtocolException)
            {
                Lose(state, e.Message);
            }
        }

        private void Lose(RunState state, string why)
        {
            if (!state.Stopping)
            {
                LostReason ??= why;
                Log.Report(Name, $"disconnected: {why}");
            }
        }

        /// <summary>Handles every buffered frame, all with one receipt time; returns whether a PING asked for a PONG.</summary>
        private bool Drain()
        {
            bool pongDue = false;
            long now = 0;
            while (connection.TryReadFrame(out ReadOnlySequence<byte> frame))
            {
                if (now == 0)
                {
                    now = Stopwatch.GetTimestamp();
                }

                if (TryHandleMessage(frame, now))
                {
                    continue;
                }

                var reader = new MessagePackReader(frame);
                FrameType type = FrameDecoder.ReadHeader(ref reader, out int elements);
                switch (type)
                {
                    case FrameType.Ping:
                        pongDue = true;
                        break;
                    case FrameType.Pong:
                        break;
                    case FrameType.Error:
                        ErrorFrame error = FrameDecoder.ReadError(ref reader, elements);
                        ErrorFrames++;
                        Log.Report(Name, BrokerErrorException.Describe(error));
                        if (error.Fatal)
                        {
                            LostReason ??= BrokerErrorException.Describe(error);
                        }

                        break;
                    default:
                        Unexpected++;
                        Log.Report(Name, $"unexpected {type} frame");
                        break;
                }
            }

            return pongDue;
        }
    }
}
