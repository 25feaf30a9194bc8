using Herald.Protocol;

namespace Herald.Broker.Engines.PollSharing;

/// <summary>
/// A single node's long-poll sessions: nothing is shared, each session's state is in its node's memory and no other
/// node asks for it. Creating, ending and giving a session up have nothing to write; no session is found elsewhere;
/// what only a shared session asks (its backlog, lease, wakes and commands) fails as <see cref="ClusterUnavailableException"/>.
/// </summary>
internal sealed class LocalSessions : ISharedSessions
{
    public static readonly LocalSessions Instance = new();

    private LocalSessions()
    {
    }

    public bool IsShared => false;

    public string Node => "";

    public TimeSpan Lease => TimeSpan.Zero;

    public TimeSpan RenewEvery => Timeout.InfiniteTimeSpan;

    public void Serve(Func<SessionCommand, Task<SessionReply>> handler, Func<int> owned)
    {
        // no other node sends requests
    }

    public Task CreateAsync(string token, string identity, string? client, int capabilities, string? info, TimeSpan ttl) => Task.CompletedTask;

    public Task<SharedSession?> FindAsync(string token) => Task.FromResult<SharedSession?>(null);

    public Task<long> AppendAsync(string token, IReadOnlyList<SharedEntry> entries, int maxPending, long maxPendingBytes, bool disconnect, TimeSpan ttl) => Unshared<long>();

    public Task<SharedPoll> PollAsync(string token, long ack, int maxMessages, int maxBytes, TimeSpan ttl, bool hold, string? generation) => Unshared<SharedPoll>();

    public ISessionWake Arm(string token) => throw NotShared();

    public Task UnholdAsync(string token, string generation) => Unshared<bool>();

    public Task<LeaseState> RenewAsync(string token, TimeSpan ttl) => Unshared<LeaseState>();

    public Task<SharedSession?> TakeOverAsync(string token) => Task.FromResult<SharedSession?>(null);

    public Task ReleaseAsync(string token) => Task.CompletedTask;

    public Task<bool> SubscriptionAsync(string token, uint sid, string? pattern, SubscribeOptions options, string? since = null, string? queue = null) => Unshared<bool>();

    public Task EndAsync(string token, string reason, TimeSpan memory, bool asOwner) => Task.CompletedTask;

    public Task<SessionReply?> SendAsync(string owner, SessionCommand command, TimeSpan timeout, CancellationToken cancellation) => Unshared<SessionReply?>();

    private static Task<T> Unshared<T>() => Task.FromException<T>(NotShared());

    private static ClusterUnavailableException NotShared() => new("This node shares no long-poll sessions.");
}
