using System.Globalization;
using System.Text;
using Herald.Broker.Delivery;
using Herald.Protocol;

namespace Herald.Broker.Engines;

/// <summary>
/// Presence on a single node (spec §15): the members of each topic in memory, as this node's sessions joined them.
/// </summary>
/// <remarks>
/// One table per topic that has members or events subscribers: its members in a set ordered by client id (a page is a
/// view of it from the cursor on: O(log n) to find, nothing copied but the page), the same members by client id, the
/// number of members per identity (the occupancy's identities, O(1)), and the subscriptions that asked for its events.
/// An event is encoded once per join or leave into one <see cref="MessageBuffer"/> and queued by reference to every events
/// subscriber, under the engine's lock so that two joins reach every subscriber in the same order; a topic without events
/// subscribers builds nothing. Publications never come here: presence costs a topic's publishers nothing.
/// Threading: every method takes <c>_gate</c>; flushes are scheduled after it is released.
/// </remarks>
/// <param name="enabled">Whether the capability is granted (<see cref="PresenceOptions.Enabled"/>).</param>
internal sealed class LocalPresence(PresenceOptions options, bool enabled) : IPresence
{
    private const string PresenceHeader = "Herald-Presence";

    private static readonly IComparer<Member> ClientOrder = Comparer<Member>.Create(static (a, b) => string.CompareOrdinal(a.Who.Client, b.Who.Client));

    /// <summary>Fewer members first; among equals, the later name (so that the busiest list ties by name).</summary>
    private static readonly Comparer<PresenceTopic> LeastBusyFirst = Comparer<PresenceTopic>.Create(static (a, b) =>
        a.Occupancy.Members != b.Occupancy.Members ? a.Occupancy.Members.CompareTo(b.Occupancy.Members) : string.CompareOrdinal(b.Topic, a.Topic));

    private readonly Lock _gate = new();
    private readonly Dictionary<string, TopicPresence> _topics = new(StringComparer.Ordinal);
    private readonly Dictionary<string, int> _perQuota = new(StringComparer.Ordinal);
    private long _entries;
    private long _watchers;
    private long _events;
    private long _suppressed;

    public bool Enabled => enabled;

    public PresenceOptions Options => options;

    public PresenceCounts Counts
    {
        get
        {
            lock (_gate)
            {
                return new PresenceCounts(_entries, _topics.Count, _watchers, _events, _suppressed);
            }
        }
    }

    public string ClientPrefix => "";

    public ValueTask<string?> JoinAsync(string topic, PresenceMember member) => new(Join(topic, member));

    /// <summary>The join <see cref="JoinAsync"/> completes with: in memory, under the lock.</summary>
    public string? Join(string topic, PresenceMember member)
    {
        List<IMessageSink>? wake = null;
        lock (_gate)
        {
            _topics.TryGetValue(topic, out TopicPresence? table);
            if (table?.ByClient.TryGetValue(member.Client, out Member? present) == true)
            {
                present.Joins++;
                return null; // one member per connection, however many of its subscriptions joined
            }

            if (table is not null && table.ByClient.Count >= options.MaxMembersPerTopic)
            {
                return $"Topic '{topic}' holds its maximum of {options.MaxMembersPerTopic} members (Herald:Presence:MaxMembersPerTopic).";
            }

            _perQuota.TryGetValue(member.Quota, out int held);
            if (held >= options.MaxPerIdentity)
            {
                return $"'{member.Quota}' is present {held} times, its maximum (Herald:Presence:MaxPerIdentity).";
            }

            if (_entries >= options.MaxEntries)
            {
                return $"The broker holds its maximum of {options.MaxEntries} presence entries (Herald:Presence:MaxEntries).";
            }

            if (table is null)
            {
                table = new TopicPresence();
                _topics.Add(topic, table);
            }

            var entry = new Member(member);
            table.ByClient.Add(member.Client, entry);
            table.Ordered.Add(entry);
            table.Identities[member.Identity] = table.Identities.GetValueOrDefault(member.Identity) + 1;
            _perQuota[member.Quota] = held + 1;
            _entries++;
            Changed(topic, table, member, joined: true, PresenceReason.Unsubscribe, ref wake);
        }

        Wake(wake);
        return null;
    }

    public void Leave(string topic, PresenceMember member, PresenceReason reason)
    {
        List<IMessageSink>? wake = null;
        lock (_gate)
        {
            if (!_topics.TryGetValue(topic, out TopicPresence? table) || !table.ByClient.TryGetValue(member.Client, out Member? entry))
            {
                return;
            }

            if (--entry.Joins > 0)
            {
                return;
            }

            table.ByClient.Remove(member.Client);
            table.Ordered.Remove(entry);
            if (--table.Identities[member.Identity] == 0)
            {
                table.Identities.Remove(member.Identity);
            }

            if (--_perQuota[member.Quota] == 0)
            {
                _perQuota.Remove(member.Quota);
            }

            _entries--;
            Changed(topic, table, member, joined: false, reason, ref wake);
            Forget(topic, table);
        }

        Wake(wake);
    }

    public void Watch(string topic, IMessageSink sink, uint sid, bool noEcho)
    {
        lock (_gate)
        {
            if (!_topics.TryGetValue(topic, out TopicPresence? table))
            {
                table = new TopicPresence();
                _topics.Add(topic, table);
            }

            table.Watchers.Add(new Watcher(sink, sid, noEcho));
            _watchers++;
        }
    }

    public void Unwatch(string topic, IMessageSink sink, uint sid)
    {
        lock (_gate)
        {
            if (_topics.TryGetValue(topic, out TopicPresence? table)
                && table.Watchers.FindIndex(w => ReferenceEquals(w.Sink, sink) && w.Sid == sid) is var at and >= 0)
            {
                table.Watchers.RemoveAt(at);
                _watchers--;
                Forget(topic, table);
            }
        }
    }

    /// <summary>The topic's number of members and of distinct identities among them: O(1).</summary>
    public PresenceOccupancy Occupancy(string topic)
    {
        lock (_gate)
        {
            return _topics.TryGetValue(topic, out TopicPresence? table) ? table.Occupancy : default;
        }
    }

    public ValueTask<PresencePage> ReadAsync(string topic, int limit, string? cursor) => new(Read(topic, limit, cursor));

    /// <summary>The page <see cref="ReadAsync"/> completes with: in memory, under the lock.</summary>
    public PresencePage Read(string topic, int limit, string? cursor)
    {
        lock (_gate)
        {
            if (!_topics.TryGetValue(topic, out TopicPresence? table) || table.Ordered.Count == 0 || limit <= 0)
            {
                return new PresencePage(table?.Occupancy ?? default, [], null);
            }

            SortedSet<Member> members = table.Ordered;
            if (cursor is not null)
            {
                if (string.CompareOrdinal(cursor, members.Max!.Who.Client) >= 0)
                {
                    return new PresencePage(table.Occupancy, [], null);
                }

                members = members.GetViewBetween(Probe(cursor), members.Max);
            }

            var entries = new List<PresenceEntry>(Math.Min(limit, table.Ordered.Count));
            string? last = null;
            bool more = false;
            foreach (Member m in members)
            {
                if (cursor is not null && string.CompareOrdinal(m.Who.Client, cursor) <= 0)
                {
                    continue; // the cursor itself: listed on the page before
                }

                if (entries.Count == limit)
                {
                    more = true;
                    break;
                }

                entries.Add(new PresenceEntry(m.Who.Client, m.Who.Identity, m.Who.Info));
                last = m.Who.Client;
            }

            return new PresencePage(table.Occupancy, entries, more ? last : null);
        }
    }

    public IReadOnlyList<PresenceTopic>? Busiest(int count)
    {
        if (count <= 0)
        {
            return [];
        }

        // A heap of the count busiest so far, the least busy on top: O(topics x log count), nothing allocated per topic.
        var busiest = new PriorityQueue<PresenceTopic, PresenceTopic>(count + 1, LeastBusyFirst);
        lock (_gate)
        {
            foreach ((string topic, TopicPresence table) in _topics)
            {
                if (table.ByClient.Count == 0 || topic.StartsWith(ProtocolConstants.InboxPrefix, StringComparison.Ordinal))
                {
                    continue;
                }

                var ranked = new PresenceTopic(topic, table.Occupancy);
                if (busiest.Count < count)
                {
                    busiest.Enqueue(ranked, ranked);
                }
                else if (LeastBusyFirst.Compare(ranked, busiest.Peek()) > 0)
                {
                    busiest.DequeueEnqueue(ranked, ranked);
                }
            }
        }

        var top = new PresenceTopic[busiest.Count];
        for (int i = top.Length - 1; i >= 0; i--)
        {
            top[i] = busiest.Dequeue();
        }

        return top;
    }

    private static Member Probe(string client) => new(new PresenceMember(client, "", null, "", DiscardingSink.Instance));

    /// <summary>A join or leave: its event to the events subscribers, or, above <see cref="PresenceOptions.MaxEventsMembers"/>, one <c>suppressed</c> (or, back at half, one <c>resumed</c>) instead. Caller holds <c>_gate</c>.</summary>
    private void Changed(string topic, TopicPresence table, PresenceMember member, bool joined, PresenceReason reason, ref List<IMessageSink>? wake)
    {
        int members = table.ByClient.Count;
        if (table.Suppressed)
        {
            if (joined || members > options.MaxEventsMembers / 2)
            {
                _suppressed += table.Watchers.Count;
                return;
            }

            table.Suppressed = false;
            _suppressed += table.Watchers.Count;
            Send(topic, table, "resumed", null, reason, members, ref wake);
            return;
        }

        if (joined && members > options.MaxEventsMembers)
        {
            table.Suppressed = true;
            _suppressed += table.Watchers.Count;
            Send(topic, table, "suppressed", null, reason, members, ref wake);
            return;
        }

        Send(topic, table, joined ? "join" : "leave", member, reason, members, ref wake);
    }

    /// <summary>Encodes one event MESSAGE (spec §15.2) and queues it by reference to every events subscriber. Caller holds <c>_gate</c>.</summary>
    private void Send(string topic, TopicPresence table, string kind, PresenceMember? member, PresenceReason reason, int members, ref List<IMessageSink>? wake)
    {
        int receivers = 0;
        foreach (Watcher w in table.Watchers)
        {
            if (!(w.NoEcho && member is not null && ReferenceEquals(w.Sink, member.Sink)))
            {
                receivers++;
            }
        }

        if (receivers == 0)
        {
            return;
        }

        MessageBuffer frame = Encode(topic, kind, member?.Client, member?.Identity, kind == "leave" ? ReasonText(reason) : null, kind == "join" ? member?.Info : null, members);
        frame.Retain(receivers - 1);
        foreach (Watcher w in table.Watchers)
        {
            if (w.NoEcho && member is not null && ReferenceEquals(w.Sink, member.Sink))
            {
                continue;
            }

            if ((w.Sink.Enqueue(frame, w.Sid) & Enqueued.Wake) != 0)
            {
                (wake ??= []).Add(w.Sink);
            }
        }

        _events += receivers;
    }

    /// <summary>
    /// One event MESSAGE (spec §15.2), its sid stamped per subscriber: <c>Herald-Presence</c> <paramref name="kind"/>, the
    /// member (for a join or leave), the reason (a leave), the occupancy; the payload the member's info on a join.
    /// </summary>
    public static MessageBuffer Encode(string topic, string kind, string? client, string? identity, string? reason, string? info, long members)
    {
        List<KeyValuePair<string, string[]>> headers = [new(PresenceHeader, [kind])];
        if (client is not null)
        {
            headers.Add(new("Herald-Client", [client]));
            headers.Add(new("Herald-Identity", [identity ?? ""]));
        }

        if (reason is not null)
        {
            headers.Add(new("Herald-Reason", [reason]));
        }

        headers.Add(new("Herald-Occupancy", [members.ToString(CultureInfo.InvariantCulture)]));
        byte[] block = HeaderBlock.Encode(headers);
        byte[] name = Encoding.UTF8.GetBytes(topic);
        byte[] payload = info is not null ? Encoding.UTF8.GetBytes(info) : [];
        MessageBuffer frame = MessageBuffer.Rent(ProtocolConstants.MessageHeaderSize + FrameWriter.EnvelopeSize(name.Length, 0, PayloadFlags.None, payload.Length) + block.Length);
        FrameWriter.WriteMessage(new MessageBufferWriter(frame), 0, name, default, PayloadFlags.None, payload, block);
        return frame;
    }

    public static string ReasonText(PresenceReason reason) => reason switch
    {
        PresenceReason.Unsubscribe => "unsubscribe",
        PresenceReason.Disconnect => "disconnect",
        PresenceReason.Expired => "expired",
        PresenceReason.Revoked => "revoked",
        _ => "node",
    };

    private static void Wake(List<IMessageSink>? wake)
    {
        if (wake is null)
        {
            return;
        }

        foreach (IMessageSink sink in wake)
        {
            sink.ScheduleFlush();
        }
    }

    /// <summary>Drops a topic's table once nobody is present or watching. Caller holds <c>_gate</c>.</summary>
    private void Forget(string topic, TopicPresence table)
    {
        if (table.ByClient.Count == 0 && table.Watchers.Count == 0)
        {
            _topics.Remove(topic);
        }
    }

    private sealed class Member(PresenceMember who)
    {
        public PresenceMember Who { get; } = who;

        /// <summary>The connection's joined subscriptions of the topic: it leaves when the last ends.</summary>
        public int Joins { get; set; } = 1;
    }

    private readonly record struct Watcher(IMessageSink Sink, uint Sid, bool NoEcho);

    private sealed class TopicPresence
    {
        public SortedSet<Member> Ordered { get; } = new(ClientOrder);

        public Dictionary<string, Member> ByClient { get; } = new(StringComparer.Ordinal);

        /// <summary>Members per identity: the occupancy's distinct identities are its count.</summary>
        public Dictionary<string, int> Identities { get; } = new(StringComparer.Ordinal);

        public List<Watcher> Watchers { get; } = [];

        /// <summary>Above <see cref="PresenceOptions.MaxEventsMembers"/>: joins and leaves are not sent until the topic is back at half.</summary>
        public bool Suppressed { get; set; }

        public PresenceOccupancy Occupancy => new(ByClient.Count, Identities.Count);
    }
}
