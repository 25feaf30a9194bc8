using System.Buffers;
using System.Globalization;
using MessagePack;

namespace Herald.LoadTest.Scenarios;

// The messages of the rpc scenario: the service of the WCF vs gRPC comparison (shared/seeds, "WCF vs gRPC -
// Round 2"), which is the WCF service template: GetData(int) -> string, GetDataUsingDataContract(CompositeType)
// -> CompositeType, and GetDataStream(min, max) -> a list of max - min CompositeTypes (42 in the post).
// Each request also carries the caller and its call number, so a reply can be matched to its call and the
// one-way responder can check every caller's sequence. Public because MessagePack's dynamic resolver
// generates its formatters in another assembly.

/// <summary>The seed's <c>CompositeType</c>: a bool, a string and an int.</summary>
[MessagePackObject]
public sealed class CompositeType
{
    [Key(0)]
    public bool BoolValue { get; set; }

    [Key(1)]
    public string StringValue { get; set; } = "";

    [Key(2)]
    public int IntValue { get; set; }
}

[MessagePackObject]
public sealed class GetDataRequest
{
    [Key(0)]
    public int Caller { get; set; }

    [Key(1)]
    public long Call { get; set; }

    [Key(2)]
    public int Value { get; set; }
}

[MessagePackObject]
public sealed class GetDataReply
{
    [Key(0)]
    public long Call { get; set; }

    [Key(1)]
    public string Value { get; set; } = "";
}

[MessagePackObject]
public sealed class CompositeRequest
{
    [Key(0)]
    public int Caller { get; set; }

    [Key(1)]
    public long Call { get; set; }

    [Key(2)]
    public CompositeType Composite { get; set; } = new();
}

[MessagePackObject]
public sealed class CompositeReply
{
    [Key(0)]
    public long Call { get; set; }

    [Key(1)]
    public CompositeType Composite { get; set; } = new();
}

[MessagePackObject]
public sealed class GetDataStreamRequest
{
    [Key(0)]
    public int Caller { get; set; }

    [Key(1)]
    public long Call { get; set; }

    [Key(2)]
    public int Min { get; set; }

    [Key(3)]
    public int Max { get; set; }
}

[MessagePackObject]
public sealed class GetDataStreamReply
{
    [Key(0)]
    public long Call { get; set; }

    [Key(1)]
    public List<CompositeType> Value { get; set; } = [];
}

/// <summary>
/// One kind of call (<c>--payload small|composite|list42</c>): how a caller writes a request, how the
/// responder answers it (deserialize the request, compute, serialize the reply, as a real service does), and
/// how a caller checks the reply. Thread-safe: no state; each caller and responder passes its own buffers.
/// </summary>
internal abstract class RpcCall
{
    private static readonly MessagePackSerializerOptions Options = MessagePackSerializerOptions.Standard;

    public static readonly string[] Names = ["small", "composite", "list42"];

    public abstract string Name { get; }

    public abstract string Description { get; }

    public static RpcCall Of(string name) => name switch
    {
        "small" => new SmallCall(),
        "composite" => new CompositeCall(),
        "list42" => new ListCall(42),
        _ => throw new UsageException($"--payload must be one of {string.Join(", ", Names)}, got '{name}'."),
    };

    /// <summary>Serializes call number <paramref name="call"/> of caller <paramref name="caller"/> into <paramref name="request"/>.</summary>
    public abstract void WriteRequest(IBufferWriter<byte> request, int caller, long call);

    /// <summary>Deserializes a request; with a <paramref name="reply"/> buffer, also computes and serializes the reply into it.</summary>
    public abstract (int Caller, long Call) Answer(ReadOnlyMemory<byte> request, IBufferWriter<byte>? reply);

    /// <summary>Deserializes a reply and says why it is not the answer to <paramref name="call"/> of <paramref name="caller"/>; null when it is.</summary>
    public abstract string? CheckReply(ReadOnlyMemory<byte> reply, int caller, long call);

    protected static T Read<T>(ReadOnlyMemory<byte> bytes) => MessagePackSerializer.Deserialize<T>(bytes, Options);

    protected static void Write<T>(IBufferWriter<byte> buffer, T value) => MessagePackSerializer.Serialize(buffer, value, Options);

    /// <summary>The int a caller sends with a call: varies with the call so a stale reply cannot pass.</summary>
    protected static int ValueOf(int caller, long call) => (int)((call * 31) + caller) & 0x7fff_ffff;

    /// <summary>GetData(int) -> "You entered: {value}".</summary>
    private sealed class SmallCall : RpcCall
    {
        public override string Name => "small";

        public override string Description => "GetData(int) -> string";

        public override void WriteRequest(IBufferWriter<byte> request, int caller, long call) =>
            Write(request, new GetDataRequest { Caller = caller, Call = call, Value = ValueOf(caller, call) });

        public override (int Caller, long Call) Answer(ReadOnlyMemory<byte> request, IBufferWriter<byte>? reply)
        {
            GetDataRequest r = Read<GetDataRequest>(request);
            if (reply is not null)
            {
                Write(reply, new GetDataReply { Call = r.Call, Value = Answer(r.Value) });
            }

            return (r.Caller, r.Call);
        }

        public override string? CheckReply(ReadOnlyMemory<byte> reply, int caller, long call)
        {
            GetDataReply r = Read<GetDataReply>(reply);
            return r.Call != call ? $"reply to call {r.Call}, expected {call}"
                : r.Value != Answer(ValueOf(caller, call)) ? $"value '{r.Value}'"
                : null;
        }

        private static string Answer(int value) => string.Create(CultureInfo.InvariantCulture, $"You entered: {value}");
    }

    /// <summary>GetDataUsingDataContract(CompositeType): appends "Suffix" to StringValue when BoolValue is set.</summary>
    private sealed class CompositeCall : RpcCall
    {
        public override string Name => "composite";

        public override string Description => "GetDataUsingDataContract(CompositeType) -> CompositeType";

        public override void WriteRequest(IBufferWriter<byte> request, int caller, long call) =>
            Write(request, new CompositeRequest { Caller = caller, Call = call, Composite = Composite(caller, call) });

        public override (int Caller, long Call) Answer(ReadOnlyMemory<byte> request, IBufferWriter<byte>? reply)
        {
            CompositeRequest r = Read<CompositeRequest>(request);
            if (reply is not null)
            {
                CompositeType c = r.Composite;
                if (c.BoolValue)
                {
                    c.StringValue += "Suffix";
                }

                Write(reply, new CompositeReply { Call = r.Call, Composite = c });
            }

            return (r.Caller, r.Call);
        }

        public override string? CheckReply(ReadOnlyMemory<byte> reply, int caller, long call)
        {
            CompositeReply r = Read<CompositeReply>(reply);
            CompositeType sent = Composite(caller, call);
            string expected = sent.BoolValue ? sent.StringValue + "Suffix" : sent.StringValue;
            return r.Call != call ? $"reply to call {r.Call}, expected {call}"
                : r.Composite.BoolValue != sent.BoolValue || r.Composite.IntValue != sent.IntValue || r.Composite.StringValue != expected ? "composite differs from the service's answer"
                : null;
        }

        private static CompositeType Composite(int caller, long call) => new()
        {
            BoolValue = call % 2 == 0,
            StringValue = "Hello ",
            IntValue = ValueOf(caller, call),
        };
    }

    /// <summary>GetDataStream(min, max) -> max - min CompositeTypes in one reply (the seed's "repeated" version, not a stream).</summary>
    private sealed class ListCall(int count) : RpcCall
    {
        public override string Name => "list42";

        public override string Description => string.Create(CultureInfo.InvariantCulture, $"GetDataStream(0, {count}) -> list of {count} CompositeType");

        public override void WriteRequest(IBufferWriter<byte> request, int caller, long call) =>
            Write(request, new GetDataStreamRequest { Caller = caller, Call = call, Min = 0, Max = count });

        public override (int Caller, long Call) Answer(ReadOnlyMemory<byte> request, IBufferWriter<byte>? reply)
        {
            GetDataStreamRequest r = Read<GetDataStreamRequest>(request);
            if (reply is not null)
            {
                var items = new List<CompositeType>(Math.Max(0, r.Max - r.Min));
                for (int i = r.Min; i < r.Max; i++)
                {
                    items.Add(Item(i));
                }

                Write(reply, new GetDataStreamReply { Call = r.Call, Value = items });
            }

            return (r.Caller, r.Call);
        }

        public override string? CheckReply(ReadOnlyMemory<byte> reply, int caller, long call)
        {
            GetDataStreamReply r = Read<GetDataStreamReply>(reply);
            if (r.Call != call)
            {
                return $"reply to call {r.Call}, expected {call}";
            }

            if (r.Value.Count != count)
            {
                return $"{r.Value.Count} items, expected {count}";
            }

            int sum = 0; // what the seed's client does with the list
            foreach (CompositeType item in r.Value)
            {
                sum += item.IntValue;
            }

            CompositeType last = r.Value[^1], wanted = Item(count - 1);
            return sum != count * (count - 1) / 2 ? $"IntValues add up to {sum}"
                : last.BoolValue != wanted.BoolValue || last.StringValue != wanted.StringValue ? "last item differs from the service's answer"
                : null;
        }

        private static CompositeType Item(int i) => new()
        {
            BoolValue = i % 2 == 0,
            StringValue = string.Create(CultureInfo.InvariantCulture, $"Item {i}"),
            IntValue = i,
        };
    }
}
