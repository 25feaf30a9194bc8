using Herald.Protocol;

namespace Herald.Broker.Engines.PollSharing;

/// <summary>
/// Long-poll sessions that every node can serve (spec cluster.md §10): a session's state (who it is, its subscriptions,
/// its backlog of messages) is kept where every node reads it. Its owner, the node whose router holds its subscriptions,
/// keeps a lease and appends what is delivered; any node acknowledges and reads on a poll; any other request is sent to
/// the owner, or, once the owner's lease has expired, the node that received it takes the session over. A backplane
/// that does not answer raises <see cref="ClusterUnavailableException"/>.
/// </summary>
internal interface ISharedSessions
{
    /// <summary>Whether sessions are shared at all; false on a single node (<see cref="LocalSessions"/>): each is its node's alone.</summary>
    bool IsShared { get; }

    /// <summary>This node's id, as a lease names it.</summary>
    string Node { get; }

    /// <summary>How long an owner's lease lasts unrenewed.</summary>
    TimeSpan Lease { get; }

    /// <summary>Renew each lease this often.</summary>
    TimeSpan RenewEvery { get; }

    /// <summary>
    /// Serves the requests other nodes send for sessions this node owns with <paramref name="handler"/>, and counts the
    /// sessions owned with <paramref name="owned"/> (monitoring). Called once, by the long-poll transport.
    /// </summary>
    void Serve(Func<SessionCommand, Task<SessionReply>> handler, Func<int> owned);

    /// <summary>A new session, owned by this node, with the client info it joins topics with (spec §15.1; null: none).</summary>
    Task CreateAsync(string token, string identity, string? client, int capabilities, string? info, TimeSpan ttl);

    /// <summary>What a node not owning the session needs to serve a request for it; null: no such session.</summary>
    Task<SharedSession?> FindAsync(string token);

    /// <summary>
    /// Appends what the owner's router delivered to a session, its shared backlog bounded by <paramref name="maxPending"/>
    /// messages and <paramref name="maxPendingBytes"/> bytes of frames (charged before an entry is written); returns
    /// messages dropped (DropOldest), -1 lease lost or session ended, -2 ended as a slow consumer. A session has one
    /// append in flight at a time, so its order holds.
    /// </summary>
    Task<long> AppendAsync(string token, IReadOnlyList<SharedEntry> entries, int maxPending, long maxPendingBytes, bool disconnect, TimeSpan ttl);

    /// <summary>
    /// One read of a poll (any node): acknowledges, then what is above the ack, at most <paramref name="maxMessages"/>
    /// and <paramref name="maxBytes"/> bytes of frames (at least one): the backplane sends no more than the answer
    /// carries. <paramref name="hold"/>: this node is woken if nothing is.
    /// </summary>
    Task<SharedPoll> PollAsync(string token, long ack, int maxMessages, int maxBytes, TimeSpan ttl, bool hold, string? generation);

    /// <summary>
    /// Arms this node's wake for the session before a poll reads (so an append between the read and the wait is
    /// not missed): the owner's next append, a newer poll, or the session's end completes it. Dispose it after.
    /// </summary>
    ISessionWake Arm(string token);

    /// <summary>A poll this node held (<paramref name="generation"/>) was answered without a message: it holds no more, unless a newer poll does.</summary>
    Task UnholdAsync(string token, string generation);

    /// <summary>The owner keeps its lease; returns how things stand.</summary>
    Task<LeaseState> RenewAsync(string token, TimeSpan ttl);

    /// <summary>Takes over a session whose owner's lease expired; null if it is gone or another node was first.</summary>
    Task<SharedSession?> TakeOverAsync(string token);

    /// <summary>Gives the lease up (a graceful stop): the next request, on any node, takes the session over at once.</summary>
    Task ReleaseAsync(string token);

    /// <summary>
    /// Records a subscription the owner made (or, with <paramref name="pattern"/> null, ended) with its SUBSCRIBE options
    /// (no-echo, join, presence events: a takeover makes it again with them), and the position a resume asked for (a
    /// takeover resumes after it until a message of the subscription is appended). False if this node no longer holds
    /// the session's lease: another node took it over, and the change must be made there.
    /// </summary>
    Task<bool> SubscriptionAsync(string token, uint sid, string? pattern, SubscribeOptions options, string? since = null, string? queue = null);

    /// <summary>Ends the session (as its owner: <paramref name="asOwner"/>; or for a node that found its owner gone); its token is answered as ended for <paramref name="memory"/>.</summary>
    Task EndAsync(string token, string reason, TimeSpan memory, bool asOwner);

    /// <summary>Sends a request to the session's owner and waits for its answer; null if none came within <paramref name="timeout"/> (it may have been carried out).</summary>
    Task<SessionReply?> SendAsync(string owner, SessionCommand command, TimeSpan timeout, CancellationToken cancellation);
}

/// <summary>A poll's armed wake (<see cref="ISharedSessions.Arm"/>); disposing it disarms it.</summary>
internal interface ISessionWake : IDisposable
{
    /// <summary>True if woken within <paramref name="timeout"/>.</summary>
    Task<bool> WaitAsync(TimeSpan timeout, CancellationToken cancellation);
}
