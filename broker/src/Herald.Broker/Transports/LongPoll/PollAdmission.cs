using Herald.Broker.Sessions;
using Microsoft.AspNetCore.Http;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// Admission of long-poll requests before they hold anything: the requests that read a body (per address and, for
/// creations, over all) and the polls held at once (<c>MaxConcurrentPolls</c>). Over a limit, 503.
/// </summary>
internal sealed class PollAdmission
{
    private readonly AddressSlots _pendingByAddress;
    private readonly SessionRegistry _registry;
    private readonly LongPollOptions _options;
    private int _creating;
    private int _polls;

    public PollAdmission(SessionRegistry registry, LongPollOptions options)
    {
        _registry = registry;
        _options = options;
        _pendingByAddress = new AddressSlots(options.MaxPendingRequestsPerAddress);
    }

    /// <summary>Polls held now, over all sessions (monitoring).</summary>
    public int HeldPolls => Volatile.Read(ref _polls);

    /// <summary>
    /// Admits a request that reads a body: at most <c>MaxPendingRequestsPerAddress</c> from one address at
    /// once and, for a creation, <c>MaxPendingSessions</c> over all (a client slow to send its body holds a
    /// slot, as WCF's maxPendingSessions counts channels not yet accepted). Over either: 503. Dispose the
    /// answer when the body is in.
    /// </summary>
    public Admission Admit(HttpContext context, bool creating)
    {
        if (_registry.IsStopping)
        {
            throw HttpProblem.Unavailable("ShuttingDown", "The broker is shutting down.", 5);
        }

        if (!_pendingByAddress.TryTake(context.Connection.RemoteIpAddress, out AddressSlots.Slot slot))
        {
            throw HttpProblem.Unavailable("TooManyPendingRequests", $"More than {_options.MaxPendingRequestsPerAddress} requests from {context.Connection.RemoteIpAddress} are being read at once.", 1);
        }

        var admission = new Admission(this, slot, creating);
        if (creating && Interlocked.Increment(ref _creating) > _options.MaxPendingSessions)
        {
            admission.Dispose();
            throw HttpProblem.Unavailable("TooManyPendingSessions", $"More than {_options.MaxPendingSessions} sessions are being created at once.", 1);
        }

        return admission;
    }

    /// <summary>Counts a poll as held (also while the broker drains: polls take what is queued); throws 503 over <see cref="LongPollOptions.MaxConcurrentPolls"/>. Pair with <see cref="EndPoll"/>.</summary>
    public void BeginPoll()
    {
        if (Interlocked.Increment(ref _polls) > _options.MaxConcurrentPolls)
        {
            Interlocked.Decrement(ref _polls);
            throw HttpProblem.Unavailable("TooManyPolls", $"More than {_options.MaxConcurrentPolls} polls are held at once.", 1);
        }
    }

    public void EndPoll() => Interlocked.Decrement(ref _polls);

    /// <summary>A request admitted by <see cref="Admit"/>; disposing it frees its slots.</summary>
    internal readonly struct Admission(PollAdmission owner, AddressSlots.Slot slot, bool creating) : IDisposable
    {
        public void Dispose()
        {
            slot.Dispose();
            if (creating)
            {
                Interlocked.Decrement(ref owner._creating);
            }
        }
    }
}
