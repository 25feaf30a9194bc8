using System.Collections.Concurrent;
using System.Globalization;
using System.Security.Cryptography;
using System.Text.Json;
using System.Text.Json.Serialization;
using Herald.Broker.Engines;
using Herald.Broker.Security;
using StackExchange.Redis;

namespace Herald.Broker.Cluster;

/// <summary>
/// The server API's actions on clients across the cluster (an <see cref="IClientControl"/>, spec cluster.md §14), all on the
/// first shard (<see cref="ClusterShards.First"/>):
/// <list type="bullet">
/// <item><b>Control channel</b> <c>P.ctl</c>: the node the API called carries an action out on its own sessions, then
/// publishes it there; every other node carries it out on its own and answers on the sender's <c>P.ctr:&lt;node&gt;</c>.
/// The sender waits for an answer from each member it knows, at most <see cref="ClusterOptions.ControlReplyTimeout"/>, and adds them up (an
/// action on one client stops waiting at the first node that held it). With <c>Herald:Cluster:Secret</c> an action
/// carries the secret's tag (<see cref="SessionSignatures"/>, path <c>ctl</c>; a reply <c>ctr:&lt;node&gt;</c>), a
/// nonce and the sender's deadline: one untagged, mis-tagged, replayed or late is refused and counted
/// (<see cref="Refused"/>), never carried out.</item>
/// <item><b>Topics</b> (an <see cref="ITopicCensus"/>): a query sent the same way; each node answers with its first matching
/// patterns (at most <see cref="TopicQuery.PerNode"/>) and its totals; a member silent past the wait is named.</item>
/// <item><b>Revocations</b> in the hash <c>P rv</c> (identity → <c>&lt;until, Unix ms&gt; &lt;reason&gt;</c>), written by
/// a script that holds it to <c>Herald:Security:MaxRevocations</c> (expired fields dropped first) and makes the key expire
/// with its last entry; <c>P rvv</c> counts its changes. A node loads the hash at start and again whenever the count moved
/// (read at every heartbeat), so a node that starts later, or missed an action while Redis was away, refuses the same
/// identities; the action itself updates every node at once.</item>
/// </list>
/// Nothing here is on the message path. Redis that cannot be reached raises <see cref="ClusterUnavailableException"/>.
/// </summary>
internal sealed class ClusterClientControl : IClientControl, ITopicCensus
{
    private const string SetScript = """
        local now = tonumber(ARGV[4])
        local max = tonumber(ARGV[5])
        if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= max then
          local all = redis.call('HGETALL', KEYS[1])
          for i = 1, #all, 2 do
            if tonumber(string.match(all[i + 1], '^%d+')) <= now then redis.call('HDEL', KEYS[1], all[i]) end
          end
          if redis.call('HLEN', KEYS[1]) >= max then return 0 end
        end
        redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
        local keep = tonumber(ARGV[2]) - now
        if redis.call('PTTL', KEYS[1]) < keep then redis.call('PEXPIRE', KEYS[1], keep) end
        redis.call('INCR', KEYS[2])
        return 1
        """;

    private readonly ClusterConnection _shard;
    private readonly ClusterNodes _nodes;
    private readonly string _node;
    private readonly EnvelopeSigner? _signer;
    private readonly CommandMemory _memory = new();
    private readonly ConcurrentDictionary<long, Answers> _pending = new();
    private Func<ClientAction, Task<ClientActionOutcome>>? _here;
    private Func<TopicQuery, NodeTopics>? _topics;
    private long _nextId;
    private long _refused;
    private long _loadedVersion = -1;

    public ClusterClientControl(ClusterShards shards, ClusterNodes nodes, Revocations revocations)
    {
        _shard = shards.First;
        _nodes = nodes;
        _node = shards.NodeId.ToString("x16", CultureInfo.InvariantCulture);
        _signer = _shard.Options.Secret is { } secret ? new EnvelopeSigner(secret) : null;
        Revocations = revocations;
    }

    public Revocations Revocations { get; }

    /// <summary>Control messages and answers refused: untagged or mis-tagged (with a secret), replayed, past their deadline, or not an action.</summary>
    public long Refused => Interlocked.Read(ref _refused);

    private RedisChannel Channel => RedisChannel.Literal(_shard.Prefix + ".ctl");

    private RedisChannel RepliesTo(string node) => RedisChannel.Literal(_shard.Prefix + ".ctr:" + node);

    private RedisKey Table => _shard.Prefix + "rv";

    private RedisKey Version => _shard.Prefix + "rvv";

    public void Serve(Func<ClientAction, Task<ClientActionOutcome>> here) => _here = here;

    public void Serve(Func<TopicQuery, NodeTopics> here) => _topics = here;

    /// <summary>
    /// Asks every member for its part of <paramref name="query"/> and waits for their answers (at most
    /// <see cref="ClusterOptions.ControlReplyTimeout"/>): this node's first, then each answer, and the members that did not answer.
    /// </summary>
    public async Task<TopicCensus> CountAsync(TopicQuery query, CancellationToken cancellationToken)
    {
        NodeTopics here = (_topics?.Invoke(query) ?? new NodeTopics(null, [], 0, 0, false)) with { Node = _node };
        try
        {
            var message = new ControlMessage { Topics = new TopicAsk { Prefix = query.Prefix, After = query.After, Limit = query.Limit } };
            (IReadOnlyCollection<ControlReply> replies, IReadOnlyList<string> silent, _) = await AskAsync(message, stopAtFirstHolder: false, cancellationToken).ConfigureAwait(false);
            List<NodeTopics> answered = [here, .. replies.Select(r => r.Census(query))];
            return new TopicCensus(answered, silent);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            throw new ClusterUnavailableException(e.Message, e);
        }
    }

    /// <summary>Listens on the control channel and this node's reply channel, then loads the revocations (at the cluster's start, and when the shard is back).</summary>
    public async Task StartAsync()
    {
        await _shard.Subscriber.SubscribeAsync(Channel, (_, body) => Received(body)).ConfigureAwait(false);
        await _shard.Subscriber.SubscribeAsync(RepliesTo(_node), (_, body) => Replied(body)).ConfigureAwait(false);
        await RefreshAsync().ConfigureAwait(false);
    }

    /// <summary>Loads the revocations again when another node changed them (the heartbeat's): a GET, and the hash only when it moved.</summary>
    public async Task RefreshAsync()
    {
        IDatabase redis = _shard.Database;
        long version = (long?)await redis.StringGetAsync(Version).ConfigureAwait(false) ?? 0;
        if (version == Interlocked.Read(ref _loadedVersion))
        {
            return;
        }

        HashEntry[] entries = await redis.HashGetAllAsync(Table).ConfigureAwait(false);
        var held = new HashSet<string>(StringComparer.Ordinal);
        foreach (HashEntry entry in entries)
        {
            if (Parse(entry.Name!, entry.Value!) is { } revocation && Revocations.Set(revocation))
            {
                held.Add(revocation.Identity);
            }
        }

        foreach (Revocation kept in Revocations.InForce())
        {
            if (!held.Contains(kept.Identity))
            {
                Revocations.Remove(kept.Identity); // lifted while this node did not hear it
            }
        }

        Interlocked.Exchange(ref _loadedVersion, version);
    }

    public async Task<ClientActionOutcome> RunAsync(ClientAction action, CancellationToken cancellationToken)
    {
        try
        {
            if (await RecordAsync(action).ConfigureAwait(false) is { } refused)
            {
                return refused;
            }

            bool mine = action.Client is null || OwnedHere(action); // an identity's clients may be anywhere; one client only on its node
            ClientActionOutcome here = mine && _here is { } serve ? await serve(action).ConfigureAwait(false) : ClientActionOutcome.None;
            if (action.Client is not null && mine)
            {
                return here; // the client is this node's: nobody else holds it
            }

            return await BroadcastAsync(action, here, cancellationToken).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            throw new ClusterUnavailableException(e.Message, e);
        }
    }

    /// <summary>A revoke or its lifting written to Redis (the bound held there) and to this node's table; null when carried on.</summary>
    private async Task<ClientActionOutcome?> RecordAsync(ClientAction action)
    {
        if (action.Kind == ClientActionKind.Revoke)
        {
            string reason = action.ReasonOr("");
            long now = Revocations.Now.ToUnixTimeMilliseconds();
            RedisResult stored = await _shard.Database.ScriptEvaluateAsync(SetScript, [Table, Version], [action.Identity!, action.Until.ToUnixTimeMilliseconds(), reason, now, Revocations.Max]).ConfigureAwait(false);
            if ((long)stored == 0)
            {
                return ClientControlRules.Full(Revocations.Max); // Redis holds the bound for the whole cluster
            }
        }
        else if (action.Kind == ClientActionKind.Unrevoke)
        {
            await _shard.Database.HashDeleteAsync(Table, action.Identity!).ConfigureAwait(false);
            await _shard.Database.StringIncrementAsync(Version).ConfigureAwait(false);
        }

        ClientControlRules.Record(Revocations, action); // this node's copy (the bound was Redis's to hold)
        return null;
    }

    /// <summary>Whether the client the action names has this node's prefix (spec §15.1): then no other node holds it.</summary>
    private bool OwnedHere(ClientAction action) => action.Client is { } client && client.StartsWith(_node, StringComparison.OrdinalIgnoreCase);

    /// <summary>Sends the action to every other node and adds up their answers, each member answering at most once, within <see cref="ClusterOptions.ControlReplyTimeout"/>.</summary>
    private async Task<ClientActionOutcome> BroadcastAsync(ClientAction action, ClientActionOutcome here, CancellationToken cancellationToken)
    {
        (IReadOnlyCollection<ControlReply> replies, _, int asked) = await AskAsync(ControlMessage.Of(action), stopAtFirstHolder: action.Client is not null, cancellationToken).ConfigureAwait(false);
        ClientActionOutcome total = here with { NodesAsked = asked };
        foreach (ControlReply reply in replies)
        {
            total = total.Plus(new ClientActionOutcome(reply.Clients, 1, asked, reply.Sid, reply.Code, reply.Message));
        }

        return total;
    }

    /// <summary>
    /// Publishes <paramref name="message"/> (its id, sender, nonce and deadline set here) and waits for an answer from each
    /// other member known, at most <see cref="ClusterOptions.ControlReplyTimeout"/>: the answers, the members that gave none
    /// (for one client, <paramref name="stopAtFirstHolder"/>: the wait ends at the node that held it, the rest not named), and
    /// how many nodes were asked, this one included.
    /// </summary>
    private async Task<(IReadOnlyCollection<ControlReply> Replies, IReadOnlyList<string> Silent, int Asked)> AskAsync(ControlMessage message, bool stopAtFirstHolder, CancellationToken cancellationToken)
    {
        string[] others = [.. _nodes.Known.Where(n => !n.Self).Select(n => n.Id)];
        long id = Interlocked.Increment(ref _nextId);
        var pending = new Answers(others.Length, stopAtFirstHolder);
        _pending[id] = pending;
        try
        {
            message.Id = id;
            message.From = _node;
            message.Nonce = Convert.ToHexStringLower(RandomNumberGenerator.GetBytes(16));
            message.Deadline = DateTimeOffset.UtcNow.Add(_shard.Options.ControlReplyTimeout).ToUnixTimeMilliseconds();
            byte[] body = SessionSignatures.Seal(_signer, "ctl", JsonSerializer.SerializeToUtf8Bytes(message, ControlJson.Default.ControlMessage));
            await _shard.Subscriber.PublishAsync(Channel, body).ConfigureAwait(false);
            if (others.Length > 0)
            {
                await Task.WhenAny(pending.Done, Task.Delay(_shard.Options.ControlReplyTimeout, cancellationToken)).ConfigureAwait(false);
            }

            IReadOnlyCollection<ControlReply> replies = pending.Replies;
            string[] silent = pending.Stopped ? [] : [.. others.Where(node => !replies.Any(r => r.Node == node))];
            return (replies, silent, others.Length + 1);
        }
        finally
        {
            _pending.TryRemove(id, out _);
        }
    }

    /// <summary>Another node's action: checked (tag, nonce, deadline), recorded, carried out here, answered.</summary>
    private void Received(RedisValue body)
    {
        ControlMessage? message = Open<ControlMessage>(body, "ctl", ControlJson.Default.ControlMessage);
        if (message is null || message.From == _node)
        {
            return; // refused (counted), or this node's own: carried out before it was sent
        }

        long now = DateTimeOffset.UtcNow.ToUnixTimeMilliseconds();
        if (message.Nonce is not { Length: > 0 } nonce || now > message.Deadline || !_memory.Admit(nonce, message.Deadline, now))
        {
            Interlocked.Increment(ref _refused);
            return;
        }

        if (message.Topics is { } topics)
        {
            _ = ReplyAsync(message.From, ControlReply.Of(message.Id, _node, _topics?.Invoke(topics.Query())));
        }
        else if (message.Action() is { } action)
        {
            _ = AnswerAsync(message, action);
        }
        else
        {
            Interlocked.Increment(ref _refused);
        }
    }

    private async Task AnswerAsync(ControlMessage message, ClientAction action)
    {
        ClientControlRules.Record(Revocations, action); // Redis holds the bound; this node's copy follows it
        ClientActionOutcome outcome = _here is { } here ? await here(action).ConfigureAwait(false) : ClientActionOutcome.None;
        await ReplyAsync(message.From, new ControlReply { Id = message.Id, Node = _node, Clients = outcome.Clients, Sid = outcome.Sid, Code = outcome.Code, Message = outcome.Message }).ConfigureAwait(false);
    }

    private async Task ReplyAsync(string to, ControlReply reply)
    {
        try
        {
            await _shard.Subscriber.PublishAsync(RepliesTo(to), SessionSignatures.Seal(_signer, "ctr:" + to, JsonSerializer.SerializeToUtf8Bytes(reply, ControlJson.Default.ControlReply))).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RedisException or TimeoutException)
        {
            // Unreachable: the sender counts this node as not answering.
        }
    }

    private void Replied(RedisValue body)
    {
        if (Open<ControlReply>(body, "ctr:" + _node, ControlJson.Default.ControlReply) is { } reply && _pending.TryGetValue(reply.Id, out Answers? pending))
        {
            pending.Add(reply);
        }
    }

    /// <summary>The JSON of a message on <paramref name="path"/>'s channel, if its tag is the secret's (with one) and it parses; else counted and null.</summary>
    private T? Open<T>(RedisValue body, string path, System.Text.Json.Serialization.Metadata.JsonTypeInfo<T> type)
        where T : class
    {
        try
        {
            if (SessionSignatures.TryOpen(_signer, path, (byte[])body!, out ReadOnlyMemory<byte> json) && JsonSerializer.Deserialize(json.Span, type) is { } value)
            {
                return value;
            }
        }
        catch (JsonException)
        {
            // counted below
        }

        Interlocked.Increment(ref _refused);
        return null;
    }

    private static Revocation? Parse(string identity, string value)
    {
        int space = value.IndexOf(' ', StringComparison.Ordinal);
        return space > 0 && long.TryParse(value.AsSpan(0, space), NumberStyles.None, CultureInfo.InvariantCulture, out long until)
            ? new Revocation(identity, DateTimeOffset.FromUnixTimeMilliseconds(until), value[(space + 1)..])
            : null;
    }

    /// <summary>The answers to one broadcast: complete when every other member answered (or, for one client, the first that held it).</summary>
    private sealed class Answers(int expected, bool stopAtFirstHolder)
    {
        private readonly TaskCompletionSource _done = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private readonly ConcurrentDictionary<string, ControlReply> _replies = new(StringComparer.Ordinal);

        public Task Done => _done.Task;

        /// <summary>Whether the wait ended at the first node that held the client (the others were not waited for).</summary>
        public bool Stopped { get; private set; }

        public IReadOnlyCollection<ControlReply> Replies => [.. _replies.Values];

        public void Add(ControlReply reply)
        {
            if (!_replies.TryAdd(reply.Node, reply))
            {
                return; // one answer per node
            }

            if (stopAtFirstHolder && (reply.Clients > 0 || reply.Code is not null))
            {
                Stopped = true;
                _done.TrySetResult();
            }
            else if (_replies.Count >= expected)
            {
                _done.TrySetResult();
            }
        }
    }
}

/// <summary>An action on the control channel (cluster.md §14): who sent it, its nonce and deadline, and the action.</summary>
internal sealed class ControlMessage
{
    public long Id { get; set; }

    public string From { get; set; } = "";

    public string? Nonce { get; set; }

    /// <summary>Unix ms: past it, a node does not carry the action out (the sender has stopped waiting).</summary>
    public long Deadline { get; set; }

    public ClientActionKind Kind { get; set; }

    public string? Client { get; set; }

    public string? Identity { get; set; }

    public string Reason { get; set; } = "";

    public long Until { get; set; }

    public string? Pattern { get; set; }

    public uint Options { get; set; }

    public bool Force { get; set; }

    /// <summary>A topics query instead of an action: each node answers with its part (<see cref="ControlReply.Entries"/>).</summary>
    public TopicAsk? Topics { get; set; }

    /// <summary>The message of <paramref name="action"/>; the sender sets its id, nonce and deadline when it sends it.</summary>
    public static ControlMessage Of(ClientAction action) => new()
    {
        Kind = action.Kind,
        Client = action.Client,
        Identity = action.Identity,
        Reason = action.Reason,
        Until = action.Until.ToUnixTimeMilliseconds(),
        Pattern = action.Pattern,
        Options = action.Options,
        Force = action.Force,
    };

    /// <summary>The action, or null when its fields do not make one (a message no node would have sent).</summary>
    public ClientAction? Action()
    {
        bool valid = Kind switch
        {
            ClientActionKind.Disconnect => (Client is null) != (Identity is null),
            ClientActionKind.Revoke or ClientActionKind.Unrevoke => Identity is not null,
            ClientActionKind.Subscribe or ClientActionKind.Unsubscribe => Client is not null && Pattern is not null,
            _ => false,
        };
        return valid
            ? new ClientAction(Kind) { Client = Client, Identity = Identity, Reason = Reason, Until = DateTimeOffset.FromUnixTimeMilliseconds(Until), Pattern = Pattern, Options = Options, Force = Force }
            : null;
    }
}

/// <summary>A topics query on the control channel (<see cref="TopicQuery"/>).</summary>
internal sealed class TopicAsk
{
    public string Prefix { get; set; } = "";

    public string After { get; set; } = "";

    public int Limit { get; set; }

    public TopicQuery Query() => new(Prefix, After, Limit);
}

/// <summary>A node's answer to an action (what it reached there) or to a topics query (its part of the listing).</summary>
internal sealed class ControlReply
{
    public long Id { get; set; }

    public string Node { get; set; } = "";

    public int Clients { get; set; }

    public uint Sid { get; set; }

    public string? Code { get; set; }

    public string? Message { get; set; }

    /// <summary>A topics query's answer: the node's first matching patterns, each <c>[pattern, subscribers]</c>, in ordinal order.</summary>
    public List<TopicEntry>? Entries { get; set; }

    public int Subscriptions { get; set; }

    public int Patterns { get; set; }

    public bool Truncated { get; set; }

    /// <summary>The reply carrying <paramref name="topics"/> (none when this node does not serve the listing).</summary>
    public static ControlReply Of(long id, string node, NodeTopics? topics) => new()
    {
        Id = id,
        Node = node,
        Entries = [.. (topics?.Entries ?? []).Select(e => new TopicEntry { Pattern = e.Pattern, Subscribers = e.Subscribers })],
        Subscriptions = topics?.Subscriptions ?? 0,
        Patterns = topics?.Patterns ?? 0,
        Truncated = topics?.Truncated ?? false,
    };

    /// <summary>This answer as the node's part of <paramref name="query"/>: at most <see cref="TopicQuery.PerNode"/> entries, whatever the node sent.</summary>
    public NodeTopics Census(TopicQuery query) =>
        new(Node, [.. (Entries ?? []).Take(query.PerNode).Select(e => (e.Pattern, e.Subscribers))], Subscriptions, Patterns, Truncated);
}

/// <summary>One pattern of a node's topics answer.</summary>
internal sealed class TopicEntry
{
    public string Pattern { get; set; } = "";

    public int Subscribers { get; set; }
}

[JsonSerializable(typeof(ControlMessage))]
[JsonSerializable(typeof(ControlReply))]
[JsonSourceGenerationOptions(DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
internal sealed partial class ControlJson : JsonSerializerContext;
