using System.Buffers;
using System.Text.Json;
using Herald.Client.Protocol;
using Herald.Client.Serialization;
using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Client.Tests.Conformance;

/// <summary>
/// Every frame vector of protocol-spec/vectors/ that concerns a client (spec §12): the broker's frames
/// through the client's reader (<see cref="ServerFrames"/>), fed whole, split at every byte and one byte
/// per segment; the client's frames through its encoder (<see cref="ClientFrames"/>), byte for byte.
/// </summary>
public class FrameVectorTests
{
    [Fact]
    public void Every_vector_file_is_run_here_or_named_as_read_elsewhere()
    {
        string[] files = [.. Directory.GetFiles(Vectors.Folder, "*.json").Select(Path.GetFileName).Order(StringComparer.Ordinal)!];
        string[] known = [.. Vectors.ServerFiles.Keys.Concat(Vectors.ClientFiles.Keys).Concat(Vectors.OtherFiles).Distinct().Order(StringComparer.Ordinal)];

        Assert.Equal(known, files);
        foreach (string file in Vectors.ServerFiles.Keys)
        {
            Assert.Contains(Vectors.Cases, v => v.File == file && v.Kind == "valid");
            Assert.Contains(Vectors.Cases, v => v.File == file && v.Kind == "incomplete");
            Assert.Contains(Vectors.Cases, v => v.File == file && v.Kind == "invalid");
        }

        foreach (string file in Vectors.ClientFiles.Keys)
        {
            Assert.Contains(Vectors.Cases, v => v.File == file && v.Kind == "valid" && v.Canonical);
        }
    }

    [Theory]
    [MemberData(nameof(Vectors.ServerValid), MemberType = typeof(Vectors))]
    public void Server_frame_decodes_to_its_fields(CaseName id)
    {
        FrameVector v = Vectors.Get(id);
        ReadOnlySequence<byte> buffer = Sequences.Whole(v.Bytes);

        Assert.True(ServerFrames.TryRead(ref buffer, Vectors.MaxFrame, out ServerFrame frame));

        Assert.True(buffer.IsEmpty);
        Assert.Equal(v.Frame, frame.Type);
        Assert.Equal(FrameText.Of(v.Frame, v.Fields), FrameText.Of(frame));
    }

    [Theory]
    [MemberData(nameof(Vectors.ServerIncomplete), MemberType = typeof(Vectors))]
    public void Incomplete_server_frame_needs_more_data_and_consumes_nothing(CaseName id)
    {
        FrameVector v = Vectors.Get(id);
        ReadOnlySequence<byte> buffer = Sequences.Whole(v.Bytes);
        ReadOnlySequence<byte> before = buffer;

        Assert.False(ServerFrames.TryRead(ref buffer, Vectors.MaxFrame, out _));

        Assert.Equal(before.Start, buffer.Start);
        Assert.Equal(before.End, buffer.End);
    }

    [Theory]
    [MemberData(nameof(Vectors.ServerInvalid), MemberType = typeof(Vectors))]
    public void Invalid_server_frame_fails_with_its_error_code(CaseName id)
    {
        FrameVector v = Vectors.Get(id);

        var e = Assert.Throws<ProtocolException>(() =>
        {
            ReadOnlySequence<byte> buffer = Sequences.Whole(v.Bytes);
            ServerFrames.TryRead(ref buffer, Vectors.MaxFrame, out _);
        });

        Assert.Equal(v.Error, e.Code);
    }

    [Theory]
    [MemberData(nameof(Vectors.ServerAll), MemberType = typeof(Vectors))]
    public void Server_frame_gives_the_same_answer_split_at_every_byte_and_byte_by_byte(CaseName id)
    {
        FrameVector v = Vectors.Get(id);
        string expected = Expected(v);

        Assert.Equal(expected, FrameText.Of(Sequences.Whole(v.Bytes), Vectors.MaxFrame));
        Assert.Equal(expected, FrameText.Of(Sequences.OneBytePerSegment(v.Bytes), Vectors.MaxFrame));
        for (int at = 0; at <= v.Bytes.Length; at++)
        {
            string actual = FrameText.Of(Sequences.SplitAt(v.Bytes, at), Vectors.MaxFrame);
            Assert.True(actual == expected, $"Split at byte {at}:\nexpected {expected}\nactual   {actual}");
        }
    }

    [Theory]
    [MemberData(nameof(Vectors.ServerValid), MemberType = typeof(Vectors))]
    public void Server_frame_followed_by_another_yields_both_in_order_at_every_split(CaseName id)
    {
        FrameVector first = Vectors.Get(id);
        FrameVector[] valid = [.. Vectors.Cases.Where(c => Vectors.ServerFiles.ContainsKey(c.File) && c.Kind == "valid")];
        FrameVector second = valid[(Array.IndexOf(valid, first) + 1) % valid.Length];
        byte[] both = [.. first.Bytes, .. second.Bytes];
        string expected = FrameText.Of(first.Frame, first.Fields) + "\n" + FrameText.Of(second.Frame, second.Fields) + "\n" + FrameText.NeedMore(0);

        for (int at = 0; at <= both.Length; at++)
        {
            Assert.Equal(expected, FrameText.Of(Sequences.SplitAt(both, at), Vectors.MaxFrame));
        }
    }

    [Theory]
    [MemberData(nameof(Vectors.ServerMessages), MemberType = typeof(Vectors))]
    public void Message_becomes_a_HeraldMessage_with_its_topic_reply_to_and_payload(CaseName id)
    {
        FrameVector v = Vectors.Get(id);
        ReadOnlySequence<byte> buffer = Sequences.OneBytePerSegment(v.Bytes);
        Assert.True(ServerFrames.TryRead(ref buffer, Vectors.MaxFrame, out ServerFrame frame));
        byte[] payload = Convert.FromHexString(v.Fields.GetProperty("payload").GetString()!);

        if ((frame.Message.Flags & PayloadFlags.Zstd) != 0)
        {
            // The payload travels compressed: the client decompresses it (bounded) or drops the message with DecompressionFailed.
            var e = Record.Exception(() => HeraldMessage.FromFrame(frame.Message, null, null, PayloadSerializer.Default, Vectors.MaxFrame));
            Assert.True(e is null || e is ProtocolException { Code: ErrorCode.DecompressionFailed }, $"Unexpected {e}");
            return;
        }

        HeraldMessage message = HeraldMessage.FromFrame(frame.Message, null, null, PayloadSerializer.Default, Vectors.MaxFrame);

        Assert.Equal(v.Fields.GetProperty("topic").GetString(), message.Topic);
        Assert.Equal(v.Fields.GetProperty("reply_to").GetString(), message.ReplyTo);
        Assert.Equal(payload, message.Payload.ToArray());
        Assert.False(message.WasCompressed);
    }

    [Theory]
    [MemberData(nameof(Vectors.ClientCanonical), MemberType = typeof(Vectors))]
    public void Client_frame_is_encoded_exactly_as_the_canonical_vector(CaseName id)
    {
        FrameVector v = Vectors.Get(id);
        JsonElement f = v.Fields;
        var output = new ArrayBufferWriter<byte>();

        switch (v.Frame)
        {
            case FrameType.Hello:
                ClientFrames.Hello(
                    output,
                    f.GetProperty("client_name").GetString()!,
                    (Capabilities)f.GetProperty("capabilities").GetUInt32(),
                    f.GetProperty("auth").GetString(),
                    f.GetProperty("version").GetUInt32(),
                    f.TryGetProperty("info", out JsonElement info) ? info.GetString() : null);
                break;
            case FrameType.Subscribe:
                WriteSubscribe(output, f);
                break;
            case FrameType.Unsubscribe:
                ClientFrames.Unsubscribe(output, f.GetProperty("sid").GetUInt32());
                break;
            case FrameType.Publish:
                byte[] replyTo = f.GetProperty("reply_to").ValueKind == JsonValueKind.Null ? [] : Utf8(f.GetProperty("reply_to"));
                byte[] payload = Convert.FromHexString(f.GetProperty("payload").GetString()!);
                byte[] headers = f.TryGetProperty("headers", out JsonElement h)
                    ? HeaderBlock.Encode(h.EnumerateObject().Select(p => new KeyValuePair<string, string[]>(p.Name, [.. p.Value.EnumerateArray().Select(x => x.GetString()!)])))
                    : [];
                ClientFrames.Publish(output, Utf8(f.GetProperty("topic")), replyTo, (PayloadFlags)f.GetProperty("flags").GetUInt32(), payload, headers);
                Assert.Equal(v.Bytes.Length, ClientFrames.PublishSize(Utf8(f.GetProperty("topic")).Length, replyTo.Length, (PayloadFlags)f.GetProperty("flags").GetUInt32(), payload.Length, headers.Length));
                break;
            case FrameType.Presence:
                ClientFrames.Presence(output, f.GetProperty("request_id").GetUInt32(), Utf8(f.GetProperty("topic")), f.GetProperty("limit").GetUInt64(), f.GetProperty("cursor").GetString());
                break;
            case FrameType.Ping:
                ClientFrames.Ping(output);
                break;
            case FrameType.Pong:
                ClientFrames.Pong(output);
                break;
            default:
                throw new InvalidDataException($"{id}: not a client frame.");
        }

        Assert.Equal(Convert.ToHexStringLower(v.Bytes), Convert.ToHexStringLower(output.WrittenSpan));
    }

    /// <summary>
    /// Every valid SUBSCRIBE vector, canonical or not (a nil or empty queue, trailing elements), means what the client
    /// writes for its fields: both decode, with the shared decoder the broker uses, to the same subscription.
    /// </summary>
    [Theory]
    [MemberData(nameof(Vectors.SubscribeValid), MemberType = typeof(Vectors))]
    public void Subscribe_vector_means_what_the_client_writes_for_its_fields(CaseName id)
    {
        FrameVector v = Vectors.Get(id);
        var output = new ArrayBufferWriter<byte>();

        WriteSubscribe(output, v.Fields);

        Assert.Equal(Subscription(v.Bytes), Subscription(output.WrittenSpan.ToArray()));
    }

    /// <summary>Every queue name a valid vector sends passes the client's own check of names (spec §4.3), which sends it unchanged.</summary>
    [Theory]
    [MemberData(nameof(Vectors.SubscribeValidWithQueue), MemberType = typeof(Vectors))]
    public void Queue_names_of_the_vectors_pass_the_clients_name_check(CaseName id)
    {
        JsonElement queue = Vectors.Get(id).Fields.GetProperty("queue");

        Assert.Equal(Utf8(queue), ClientTopics.EncodeQueue(queue.GetString()!, "queue"));
    }

    /// <summary>The client's SUBSCRIBE for a vector's fields: <c>since</c> and <c>queue</c> when the vector has them (spec §4.3).</summary>
    private static void WriteSubscribe(ArrayBufferWriter<byte> output, JsonElement f) =>
        ClientFrames.Subscribe(
            output,
            f.GetProperty("sid").GetUInt32(),
            Utf8(f.GetProperty("pattern")),
            (SubscribeOptions)f.GetProperty("options").GetUInt32(),
            f.TryGetProperty("since", out JsonElement since) ? new StreamPosition(since.GetProperty("offset").GetUInt64(), since.GetProperty("epoch").GetString()!) : null,
            f.TryGetProperty("queue", out JsonElement queue) ? Utf8(queue) : default);

    /// <summary>A SUBSCRIBE frame (prefix included) as the broker's decoder reads it, as one comparable line.</summary>
    private static string Subscription(byte[] frame)
    {
        var reader = new MessagePack.MessagePackReader(frame.AsMemory(ProtocolConstants.LengthPrefixSize));
        Assert.Equal(FrameType.Subscribe, FrameDecoder.ReadHeader(ref reader, out int count));
        SubscribeFrame s = FrameDecoder.ReadSubscribe(ref reader, count);
        return $"sid={s.Sid} pattern={s.PatternString} options={(uint)s.Options} since={(s.Since is { } p ? $"{p.Offset}/{p.Epoch}" : "nil")} queue={s.QueueString ?? "nil"}";
    }

    private static string Expected(FrameVector v) => v.Kind switch
    {
        "valid" => FrameText.Of(v.Frame, v.Fields) + "\n" + FrameText.NeedMore(0),
        "incomplete" => FrameText.NeedMore(v.Bytes.Length),
        _ => FrameText.Failed(v.Error),
    };

    private static byte[] Utf8(JsonElement e) => System.Text.Encoding.UTF8.GetBytes(e.GetString()!);
}
