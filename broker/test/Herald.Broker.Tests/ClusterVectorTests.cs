using System.Buffers;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Herald.Broker.Cluster;
using Herald.Broker.Routing;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// <c>protocol-spec/vectors/cluster.json</c> (cluster.md §7): the key and Redis name of each pattern, the cover
/// of a set of patterns, and the envelope between nodes (with the queue groups it gives to other nodes, §11), read
/// and written byte for byte; the id of a queue group.
/// </summary>
public sealed class ClusterVectorTests
{
    private static readonly Lazy<JsonElement> Root = new(() => VectorFiles.Load("cluster.json"));

    private static string Prefix => Root.Value.GetProperty("channel_prefix").GetString()!;

    public static TheoryData<string> Keys => Names("keys", "pattern");

    public static TheoryData<string> Covers => Names("covers", "name");

    public static TheoryData<string> ValidEnvelopes => Names("envelopes.valid", "name");

    public static TheoryData<string> InvalidEnvelopes => Names("envelopes.invalid", "name");

    public static TheoryData<string> AssignedEnvelopes => Names("envelopes.assigned", "name");

    public static TheoryData<string> GroupIds => Names("group_ids", "key");

    public static TheoryData<string> SignedValid => Names("signed.valid", "name");

    public static TheoryData<string> SignedInvalid => Names("signed.invalid", "name");

    public static TheoryData<string> HistoryKeys => Names("history_keys", "topic");

    public static TheoryData<string> PositionedValid => Names("positioned.valid", "name");

    public static TheoryData<string> PresenceEventsValid => Names("presence_events.valid", "name");

    public static TheoryData<string> PresenceEventsInvalid => Names("presence_events.invalid", "name");

    public static TheoryData<string> PresenceKeys => Names("presence_keys", "topic");

    public static TheoryData<string> PositionedInvalid => Names("positioned.invalid", "name");

    public static TheoryData<string> Shards => Names("shards", "key");

    private static string Secret => Root.Value.GetProperty("signed").GetProperty("secret").GetString()!;

    [Theory]
    [MemberData(nameof(Keys))]
    public void A_pattern_has_its_key_and_Redis_name(string pattern)
    {
        JsonElement vector = Find("keys", "pattern", pattern);
        CoverKey key = CoverKey.Of(pattern);
        Assert.Equal(new CoverKey(vector.GetProperty("literal").GetString()!, vector.GetProperty("prefix").GetBoolean()), key);
        Assert.Equal(vector.GetProperty("redis").GetString(), key.RedisName(Prefix));
    }

    [Theory]
    [MemberData(nameof(Covers))]
    public void A_set_of_patterns_has_its_cover(string name)
    {
        JsonElement vector = Find("covers", "name", name);
        var cover = vector.TryGetProperty("max_keys_per_inbox", out JsonElement max) ? new InterestCover(max.GetInt32()) : new InterestCover();
        foreach (JsonElement pattern in vector.GetProperty("patterns").EnumerateArray())
        {
            cover.Add(pattern.GetString()!);
        }

        Assert.Equal(
            vector.GetProperty("cover").EnumerateArray().Select(c => c.GetString()!).Order(),
            cover.Compute().Select(k => k.RedisName(Prefix)).Order());
    }

    [Theory]
    [MemberData(nameof(ValidEnvelopes))]
    public void A_valid_envelope_reads_to_its_fields_and_is_written_from_them_byte_for_byte(string name)
    {
        JsonElement vector = Find("envelopes.valid", "name", name);
        byte[] bytes = Convert.FromHexString(vector.GetProperty("hex").GetString()!);
        ulong origin = ulong.Parse(vector.GetProperty("origin").GetString()!, NumberStyles.HexNumber, CultureInfo.InvariantCulture);
        ulong sequence = vector.GetProperty("sequence").GetUInt64();
        JsonElement fields = vector.GetProperty("fields");

        Assert.True(ClusterEnvelope.TryRead(bytes, signer: null, out ulong readOrigin, out ulong readSequence, out ReadOnlyMemory<byte> assignments, out ReadOnlyMemory<byte> body));
        Assert.Equal((origin, sequence), (readOrigin, readSequence));
        Assert.True(assignments.IsEmpty); // version 1: no queue group given to another node
        PublishFrame publish = ClusterEnvelope.ReadPublish(body);
        Assert.Equal(fields.GetProperty("topic").GetString(), publish.TopicString);
        Assert.Equal(fields.GetProperty("reply_to").GetString(), publish.ReplyToString);
        Assert.Equal(fields.GetProperty("flags").GetInt32(), (int)publish.Flags);
        Assert.Equal(fields.GetProperty("payload").GetString(), Convert.ToHexStringLower(publish.Payload.ToArray()));
        Assert.Equal(fields.TryGetProperty("headers", out JsonElement headers) ? headers.EnumerateObject().Sum(h => h.Value.GetArrayLength()) : 0, publish.HeaderValues);

        // Written from the fields as a client's PUBLISH frame carries them, from that origin, then stamped.
        var frame = new ArrayBufferWriter<byte>();
        string? replyTo = fields.GetProperty("reply_to").GetString();
        FrameWriter.WritePublish(
            frame,
            Encoding.ASCII.GetBytes(publish.TopicString),
            replyTo is null ? default : Encoding.ASCII.GetBytes(replyTo),
            publish.Flags,
            Convert.FromHexString(fields.GetProperty("payload").GetString()!),
            publish.Headers.ToArray());
        var reader = new MessagePack.MessagePackReader(frame.WrittenMemory[ProtocolConstants.LengthPrefixSize..]);
        FrameDecoder.ReadHeader(ref reader, out int count);
        byte[] written = ClusterEnvelope.Write(FrameDecoder.ReadPublish(ref reader, count), origin);
        ClusterEnvelope.Stamp(written, sequence);
        Assert.Equal(Convert.ToHexStringLower(bytes), Convert.ToHexStringLower(written));
    }

    [Theory]
    [MemberData(nameof(AssignedEnvelopes))]
    public void An_envelope_giving_queue_groups_to_other_nodes_reads_to_its_assignments_and_is_written_from_them_byte_for_byte(string name)
    {
        JsonElement vector = Find("envelopes.assigned", "name", name);
        byte[] bytes = Convert.FromHexString(vector.GetProperty("hex").GetString()!);
        ulong origin = Hex(vector.GetProperty("origin"));
        ulong sequence = vector.GetProperty("sequence").GetUInt64();

        Assert.True(ClusterEnvelope.TryRead(bytes, signer: null, out ulong readOrigin, out ulong readSequence, out ReadOnlyMemory<byte> assignments, out ReadOnlyMemory<byte> body));
        Assert.Equal((origin, sequence), (readOrigin, readSequence));
        Assert.Equal(
            vector.GetProperty("assignments").EnumerateArray().Select(a => (Hex(a.GetProperty("group")), Hex(a.GetProperty("node")))),
            Enumerable.Range(0, assignments.Length / GroupAssignments.Size).Select(i => (
                System.Buffers.Binary.BinaryPrimitives.ReadUInt64BigEndian(assignments.Span[(i * GroupAssignments.Size)..]),
                System.Buffers.Binary.BinaryPrimitives.ReadUInt64BigEndian(assignments.Span[((i * GroupAssignments.Size) + 8)..]))));
        PublishFrame publish = ClusterEnvelope.ReadPublish(body);
        JsonElement fields = vector.GetProperty("fields");
        Assert.Equal(fields.GetProperty("topic").GetString(), publish.TopicString);
        Assert.Equal(fields.GetProperty("reply_to").GetString(), publish.ReplyToString);
        Assert.Equal(fields.GetProperty("payload").GetString(), Convert.ToHexStringLower(publish.Payload.ToArray()));

        byte[] written = ClusterEnvelope.Write(publish, origin, signed: false, AssignmentsOf(vector));
        ClusterEnvelope.Stamp(written, sequence);
        Assert.Equal(Convert.ToHexStringLower(bytes), Convert.ToHexStringLower(written));
    }

    [Theory]
    [MemberData(nameof(GroupIds))]
    public void A_queue_group_has_its_key_and_id(string key)
    {
        JsonElement vector = Find("group_ids", "key", key);
        string pattern = vector.GetProperty("pattern").GetString()!;
        string queue = vector.GetProperty("queue").GetString()!;
        string identity = vector.GetProperty("identity").GetString()!;
        Assert.Equal(key, Subscription.GroupKey(identity, pattern, queue));
        ulong id = Hex(vector.GetProperty("id"));
        Assert.Equal(id, Subscription.IdOf(key));
        Assert.Equal(id, new Subscription(new NoSink(), 1, pattern, noEcho: false, queue, identity).GroupId);
        Assert.Equal(id, Subscription.Elsewhere(7, pattern, queue, identity, members: 2).GroupId); // the same group, held on another node
    }

    [Theory]
    [MemberData(nameof(InvalidEnvelopes))]
    public void An_invalid_envelope_is_refused_where_the_vector_says(string name)
    {
        JsonElement vector = Find("envelopes.invalid", "name", name);
        byte[] bytes = Convert.FromHexString(vector.GetProperty("hex").GetString()!);
        bool header = ClusterEnvelope.TryRead(bytes, signer: null, out _, out _, out ReadOnlyMemory<byte> body);
        if (vector.GetProperty("reason").GetString() == "header")
        {
            Assert.False(header);
        }
        else
        {
            Assert.True(header);
            Assert.Throws<ProtocolException>(() => ClusterEnvelope.ReadPublish(body));
        }
    }

    [Theory]
    [MemberData(nameof(HistoryKeys))]
    public void A_history_topic_has_its_hash_and_stream_keys(string topic)
    {
        JsonElement vector = Find("history_keys", "topic", topic);
        string prefix = Root.Value.GetProperty("channel_prefix").GetString()!;
        Assert.Equal(vector.GetProperty("hash").GetString(), (string?)ClusterHistory.HashKey(prefix, System.Text.Encoding.ASCII.GetBytes(topic)));
        Assert.Equal(vector.GetProperty("stream").GetString(), (string?)ClusterHistory.StreamKey(prefix, System.Text.Encoding.ASCII.GetBytes(topic)));
    }

    [Theory]
    [MemberData(nameof(Shards))]
    public void A_topic_or_token_lives_on_the_shard_its_hash_names(string key)
    {
        JsonElement vector = Find("shards", "key", key);
        byte[] utf8 = System.Text.Encoding.UTF8.GetBytes(key);
        Assert.Equal(vector.GetProperty("xxhash64").GetString(), System.IO.Hashing.XxHash64.HashToUInt64(utf8).ToString("x16", System.Globalization.CultureInfo.InvariantCulture));
        foreach (JsonProperty count in vector.GetProperty("shards").EnumerateObject())
        {
            Assert.Equal(count.Value.GetInt32(), ClusterShards.ShardOf(utf8, int.Parse(count.Name, System.Globalization.CultureInfo.InvariantCulture)));
        }
    }

    [Theory]
    [MemberData(nameof(PositionedValid))]
    public void A_positioned_publication_reads_to_its_offset_epoch_and_envelope(string name)
    {
        JsonElement vector = Find("positioned.valid", "name", name);
        byte[] bytes = Convert.FromHexString(vector.GetProperty("hex").GetString()!);

        Assert.True(ClusterHistory.TryReadPositioned(bytes, out ulong offset, out string epoch, out ReadOnlyMemory<byte> envelope));

        Assert.Equal((vector.GetProperty("offset").GetUInt64(), vector.GetProperty("epoch").GetString()), (offset, epoch));
        Assert.Equal(vector.GetProperty("envelope").GetString(), Convert.ToHexStringLower(envelope.Span));
        Assert.True(ClusterEnvelope.TryRead(envelope, signer: null, out _, out _, out _));
    }

    [Theory]
    [MemberData(nameof(PositionedInvalid))]
    public void What_is_not_a_positioned_publication_is_not_read_as_one(string name)
    {
        byte[] bytes = Convert.FromHexString(Find("positioned.invalid", "name", name).GetProperty("hex").GetString()!);
        Assert.False(ClusterHistory.TryReadPositioned(bytes, out _, out _, out _));
    }

    [Theory]
    [MemberData(nameof(SignedValid))]
    public void A_signed_envelope_verifies_with_the_secret_and_is_signed_byte_for_byte(string name)
    {
        JsonElement vector = Find("signed.valid", "name", name);
        byte[] bytes = Convert.FromHexString(vector.GetProperty("hex").GetString()!);
        using var signer = new EnvelopeSigner(Secret);
        Assert.True(ClusterEnvelope.TryRead(bytes, signer, out ulong origin, out ulong sequence, out ReadOnlyMemory<byte> body));
        Assert.Equal(vector.GetProperty("sequence").GetUInt64(), sequence);
        PublishFrame publish = ClusterEnvelope.ReadPublish(body);
        Assert.Equal(vector.GetProperty("fields").GetProperty("topic").GetString(), publish.TopicString);
        Assert.False(ClusterEnvelope.TryRead(bytes, signer: null, out _, out _, out _)); // a node without the secret takes no version 2

        byte[] written = ClusterEnvelope.Write(publish, origin, signed: true, AssignmentsOf(vector));
        ClusterEnvelope.Stamp(written, sequence);
        signer.Sign(written);
        Assert.Equal(Convert.ToHexStringLower(bytes), Convert.ToHexStringLower(written));
    }

    [Theory]
    [MemberData(nameof(SignedInvalid))]
    public void A_node_with_the_secret_refuses_what_its_tag_does_not_vouch_for(string name)
    {
        byte[] bytes = Convert.FromHexString(Find("signed.invalid", "name", name).GetProperty("hex").GetString()!);
        using var signer = new EnvelopeSigner(Secret);
        Assert.False(ClusterEnvelope.TryRead(bytes, signer, out _, out _, out _));
    }

    private static ulong Hex(JsonElement hex) => ulong.Parse(hex.GetString()!, NumberStyles.HexNumber, CultureInfo.InvariantCulture);

    /// <summary>The vector's assignments as the router records them, or null when it has none.</summary>
    private static GroupAssignments? AssignmentsOf(JsonElement vector)
    {
        if (!vector.TryGetProperty("assignments", out JsonElement assignments))
        {
            return null;
        }

        GroupAssignments groups = new GroupAssignments(self: 1).Decide();
        foreach (JsonElement assignment in assignments.EnumerateArray())
        {
            Assert.True(groups.TryAssign(Hex(assignment.GetProperty("group")), Hex(assignment.GetProperty("node"))));
        }

        return groups;
    }

    private sealed class NoSink : Herald.Broker.Delivery.IMessageSink
    {
        public bool AcceptsZstd => false;

        public bool AcceptsHeaders => false;

        public Herald.Broker.Delivery.Enqueued Enqueue(Herald.Broker.Delivery.MessageBuffer frame, uint sid) => throw new InvalidOperationException();

        public void Flush()
        {
        }

        public void ScheduleFlush()
        {
        }
    }

    [Theory]
    [MemberData(nameof(PresenceEventsValid))]
    public void A_presence_event_reads_to_its_fields(string name)
    {
        JsonElement vector = Find("presence_events.valid", "name", name);
        Assert.True(PresenceScripts.TryRead(Convert.FromHexString(vector.GetProperty("hex").GetString()!), out PresenceEvent read));
        Assert.Equal(
            new PresenceEvent(
                vector.GetProperty("state").GetString()![0],
                vector.GetProperty("reason").GetString()![0],
                vector.GetProperty("members").GetInt64(),
                vector.GetProperty("origin").GetString()!,
                vector.GetProperty("topic").GetString()!,
                vector.GetProperty("client").GetString()!,
                vector.GetProperty("identity").GetString()!,
                vector.GetProperty("info").GetString()),
            read);
    }

    [Theory]
    [MemberData(nameof(PresenceEventsInvalid))]
    public void What_is_not_a_presence_event_is_not_read_as_one(string name) =>
        Assert.False(PresenceScripts.TryRead(Convert.FromHexString(Find("presence_events.invalid", "name", name).GetProperty("hex").GetString()!), out _));

    [Theory]
    [MemberData(nameof(PresenceKeys))]
    public void A_topics_presence_has_its_keys_and_a_member_its_entry(string topic)
    {
        JsonElement vector = Find("presence_keys", "topic", topic);
        string node = vector.GetProperty("node").GetString()!;
        Assert.Equal(
            (vector.GetProperty("members").GetString(), vector.GetProperty("entries").GetString(), vector.GetProperty("identities").GetString(), vector.GetProperty("node_topics").GetString(), vector.GetProperty("nodes").GetString()),
            ((string?)PresenceScripts.Members(Prefix, topic), (string?)PresenceScripts.Entries(Prefix, topic), (string?)PresenceScripts.Identities(Prefix, topic), (string?)PresenceScripts.NodeTopics(Prefix, node), (string?)PresenceScripts.Nodes(Prefix)));
        Assert.Equal(vector.GetProperty("entry").GetString(), PresenceScripts.Entry(vector.GetProperty("entry_identity").GetString()!, vector.GetProperty("entry_info").GetString()));
    }

    private static JsonElement.ArrayEnumerator Cases(string path)
    {
        JsonElement node = Root.Value;
        foreach (string part in path.Split('.'))
        {
            node = node.GetProperty(part);
        }

        return node.EnumerateArray();
    }

    private static TheoryData<string> Names(string path, string property) => [.. Cases(path).Select(c => c.GetProperty(property).GetString()!)];

    private static JsonElement Find(string path, string property, string value) => Cases(path).Single(c => c.GetProperty(property).GetString() == value);
}
