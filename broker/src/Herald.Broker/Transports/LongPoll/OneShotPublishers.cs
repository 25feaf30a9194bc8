using System.Collections.Concurrent;
using System.Net;
using Herald.Broker.Security;
using Herald.Broker.Sessions;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// The one-shot publishers of <c>POST /poll/publish</c> (longpoll §1.3): one per identity (authentication on) or per
/// address (off), so every one-shot request of an owner shares a publish rate bucket; forgotten once idle.
/// </summary>
internal sealed class OneShotPublishers(PollSessionStore store, SessionRegistry registry)
{
    private readonly ConcurrentDictionary<string, PollSession> _publishers = new(StringComparer.Ordinal);

    /// <summary>
    /// The one-shot publisher for this identity (authentication on) or address (off): never registered, subscribed
    /// or polled; kept while it is used, so its publish rate bucket binds every one-shot request of its owner.
    /// Callers take its <see cref="PollSession.Requests"/>.
    /// </summary>
    public PollSession Of(Identity identity, IPEndPoint? remote)
    {
        string key = store.Broker.Authenticator.Mode != AuthMode.None ? $"identity:{identity.Name}" : $"address:{remote?.Address}";
        if (_publishers.TryGetValue(key, out PollSession? session))
        {
            return session;
        }

        LongPollOptions options = store.Options;
        if (_publishers.Count >= options.MaxSessions)
        {
            throw HttpProblem.Unavailable("TooManySessions", $"The broker holds its maximum of {options.MaxSessions} one-shot publishers.", 5);
        }

        return _publishers.GetOrAdd(key, _ => new PollSession(store.Broker, store, options, token: "", 0, remote, budget: null, registry.UnlistedInput));
    }

    /// <summary>Forgets the publishers idle past <c>InactivityTimeout</c> with no request in progress.</summary>
    public void Sweep()
    {
        foreach ((string key, PollSession oneShot) in _publishers)
        {
            if (oneShot.Idle > store.Options.InactivityTimeout && oneShot.Requests.CurrentCount == 1)
            {
                _publishers.TryRemove(key, out _);
            }
        }
    }
}
