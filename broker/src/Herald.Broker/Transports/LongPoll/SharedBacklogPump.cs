using System.Globalization;
using Herald.Broker.Delivery;
using Herald.Broker.Engines;
using Herald.Broker.Engines.PollSharing;
using Herald.Protocol;
using MessagePack;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// The reader of a shared session's backlog on its owner (spec cluster.md §10): what the router queued is
/// appended to the session's shared backlog (<see cref="ISharedSessions.AppendAsync"/>), in batches, and released
/// here once it is kept there. Polls, on any node, read it. While the backplane is unreachable the backlog holds what waits, within its own limits.
/// </summary>
internal sealed class SharedBacklogPump : IBacklogReader
{
    private const int MaxBatchMessages = 256;
    private const long MaxBatchBytes = 1024 * 1024;

    private readonly PollSession _session;
    private readonly ISharedSessions _shared;
    private TaskCompletionSource _signal = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private volatile bool _stopped;

    public SharedBacklogPump(PollSession session, ISharedSessions shared, long baseSequence)
    {
        _session = session;
        _shared = shared;
        BaseSequence = baseSequence;
        session.Backlog.Reader = this;
        session.Backlog.ReadsByWindow = true; // its loss marks are appended as entries, where they lie
        Completion = Task.Run(RunAsync);
    }

    /// <summary>The stream's sequence before this node's first append (a takeover continues where the last owner stopped).</summary>
    public long BaseSequence { get; }

    /// <summary>Ends when the pump stops.</summary>
    public Task Completion { get; }

    public void Wake(bool inline) => Volatile.Read(ref _signal).TrySetResult();

    /// <summary>Stops appending (the session ended or moved).</summary>
    public void Stop()
    {
        _stopped = true;
        Wake(inline: false);
    }

    private async Task RunAsync()
    {
        long pumped = 0;
        LongPollOptions options = _session.Options;
        while (!_stopped)
        {
            await Volatile.Read(ref _signal).Task.ConfigureAwait(false);
            Volatile.Write(ref _signal, new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously)); // a wake from now on is seen
            while (!_stopped && _session.Backlog.TakeAbove(pumped, MaxBatchMessages, MaxBatchBytes, out WindowTake take, marksAsEntries: true))
            {
                try
                {
                    bool positions = _session.Backlog.AcceptsHeaders; // read per batch: the session opens after its pump starts
                    var entries = new SharedEntry[take.Count];
                    for (int i = 0; i < take.Count; i++)
                    {
                        QueuedFrame queued = take.Frames[i];
                        entries[i] = new SharedEntry(BaseSequence + take.FirstSequence + i, queued.Sid, queued.Frame.Memory, positions && queued.Sid != LossMark.Sid ? PositionOf(queued.Frame) : null);
                    }

                    long appended = await AppendAsync(entries, options).ConfigureAwait(false);
                    if (appended == -1)
                    {
                        _session.Moved(lost: !_stopped); // another node has it (our lease expired), or it ended elsewhere
                        return;
                    }

                    if (appended == -2)
                    {
                        _session.Close(ErrorCode.SlowConsumer, $"More than {options.MaxPendingMessagesPerSession} unacknowledged messages or {_session.Backlog.Limits.MaxBytes} bytes.");
                        return;
                    }

                    if (appended > 0)
                    {
                        _session.Metrics.Dropped(appended);
                    }

                    pumped = take.FirstSequence + take.Count - 1;
                    _session.Backlog.Acknowledge(pumped);
                }
                finally
                {
                    take.Release();
                }
            }
        }
    }

    /// <summary>Appends, trying again while the backplane is unreachable (the backlog keeps what arrives meanwhile, within its limits); -1 once stopped.</summary>
    private async Task<long> AppendAsync(SharedEntry[] entries, LongPollOptions options)
    {
        TimeSpan pause = TimeSpan.FromMilliseconds(50);
        while (!_stopped)
        {
            try
            {
                return await _shared.AppendAsync(_session.Token, entries, options.MaxPendingMessagesPerSession, _session.Backlog.Limits.MaxBytes, options.SlowConsumerPolicy == SlowConsumerPolicy.Disconnect, _session.StateTimeToLive).ConfigureAwait(false);
            }
            catch (ClusterUnavailableException)
            {
                await Task.Delay(pause).ConfigureAwait(false);
                pause = TimeSpan.FromMilliseconds(Math.Min(1000, pause.TotalMilliseconds * 2));
            }
        }

        return -1;
    }

    /// <summary>The stream position a MESSAGE carries (history topics, spec §13), as "offset epoch"; null if none.</summary>
    private static string? PositionOf(MessageBuffer frame)
    {
        var reader = new MessagePackReader(frame.Memory[ProtocolConstants.LengthPrefixSize..]);
        FrameDecoder.ReadHeader(ref reader, out int count);
        PublishFrame message = FrameDecoder.ReadMessage(ref reader, count);
        return message.HasHeaders && StreamPosition.TryRead(message.Headers, out StreamPosition position)
            ? position.Offset.ToString(CultureInfo.InvariantCulture) + " " + position.Epoch
            : null;
    }
}
