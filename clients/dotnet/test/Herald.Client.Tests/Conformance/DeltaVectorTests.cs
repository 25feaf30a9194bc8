using System.Buffers;
using System.Text.Json;
using Herald.Client.Serialization;
using Herald.Protocol;

namespace Herald.Client.Tests.Conformance;

/// <summary>
/// <c>vectors/delta.json</c> (spec §11.2, §12) through the client's own path: a MESSAGE with the delta flag, on a
/// subscription whose previous payload is the vector's source, is handed to the application as the target; an
/// invalid delta is <see cref="ErrorCode.DecompressionFailed"/>, judged against the file's <c>max_payload</c>.
/// </summary>
public class DeltaVectorTests
{
    private static readonly Lazy<JsonDocument> File = new(() => JsonDocument.Parse(System.IO.File.ReadAllBytes(Path.Combine(Vectors.Folder, "delta.json"))));

    public static TheoryData<string> Valid => Names("valid");

    public static TheoryData<string> Invalid => Names("invalid");

    private static int MaxPayload => File.Value.RootElement.GetProperty("max_payload").GetInt32();

    [Theory]
    [MemberData(nameof(Valid))]
    public void A_delta_message_is_handed_over_as_its_target(string name)
    {
        JsonElement v = Case("valid", name);

        HeraldMessage message = Apply(Hex(v, "source"), Hex(v, "delta"));

        Assert.True(message.WasDelta);
        Assert.Equal(v.GetProperty("target").GetString(), Convert.ToHexStringLower(message.Payload.Span));
    }

    [Theory]
    [MemberData(nameof(Invalid))]
    public void An_invalid_delta_is_refused_with_its_error(string name)
    {
        JsonElement v = Case("invalid", name);

        var e = Assert.Throws<ProtocolException>(() => Apply(Hex(v, "source"), Hex(v, "delta")));

        Assert.Equal(Enum.Parse<ErrorCode>(v.GetProperty("error").GetString()!), e.Code);
    }

    [Fact]
    public void A_delta_with_no_base_on_the_connection_is_refused()
    {
        var subscription = Subscription();
        object connection = new();
        var frame = new PublishFrame(1, Bytes("t"), null, PayloadFlags.Delta, Bytes("1\n1:x"), default);

        var e = Assert.Throws<ProtocolException>(() => HeraldMessage.FromDeltaFrame(frame, connection, null, subscription, PayloadSerializer.Default, MaxPayload));

        Assert.Equal(ErrorCode.DecompressionFailed, e.Code);
    }

    private static HeraldMessage Apply(byte[] source, byte[] delta)
    {
        HeraldSubscription subscription = Subscription();
        object connection = new();
        var full = new PublishFrame(1, Bytes("t"), null, PayloadFlags.None, new ReadOnlySequence<byte>(source), default);
        HeraldMessage.FromDeltaFrame(full, connection, null, subscription, PayloadSerializer.Default, MaxPayload);
        var frame = new PublishFrame(1, Bytes("t"), null, PayloadFlags.Delta, new ReadOnlySequence<byte>(delta), default);
        return HeraldMessage.FromDeltaFrame(frame, connection, null, subscription, PayloadSerializer.Default, MaxPayload);
    }

    private static HeraldSubscription Subscription() =>
        new(new HeraldClient(new HeraldClientOptions { Url = "tcp://127.0.0.1:1" }), 1, "t", "t"u8.ToArray(), SubscribeOptions.Delta, 4, System.Threading.Channels.BoundedChannelFullMode.Wait, handler: null, context: null);

    private static ReadOnlySequence<byte> Bytes(string text) => new(System.Text.Encoding.UTF8.GetBytes(text));

    private static byte[] Hex(JsonElement v, string field) => Convert.FromHexString(v.GetProperty(field).GetString()!);

    private static JsonElement Case(string kind, string name) =>
        File.Value.RootElement.GetProperty(kind).EnumerateArray().Single(c => c.GetProperty("name").GetString() == name);

    private static TheoryData<string> Names(string kind)
    {
        var data = new TheoryData<string>();
        foreach (JsonElement c in File.Value.RootElement.GetProperty(kind).EnumerateArray())
        {
            data.Add(c.GetProperty("name").GetString()!);
        }

        return data;
    }
}
