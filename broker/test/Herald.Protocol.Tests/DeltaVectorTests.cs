using System.Text.Json;
using Xunit;

namespace Herald.Protocol.Tests;

/// <summary>
/// <c>vectors/delta.json</c> (spec §11.2, §12) through <see cref="FossilDelta"/>: every valid delta applies to its
/// target and is what this encoder makes from source to target (the reference is npm fossil-delta 2.0.0); every
/// invalid one is refused with its error, judged against the file's <c>max_payload</c>.
/// </summary>
public class DeltaVectorTests
{
    private static readonly Lazy<JsonDocument> File = new(() => JsonDocument.Parse(System.IO.File.ReadAllBytes(Path.Combine(VectorCatalog.Folder, "delta.json"))));

    public static TheoryData<CaseName> Valid => Names("valid");

    public static TheoryData<CaseName> Invalid => Names("invalid");

    private static int MaxPayload => File.Value.RootElement.GetProperty("max_payload").GetInt32();

    [Theory]
    [MemberData(nameof(Valid))]
    public void Valid_delta_applies_to_its_target_and_is_what_the_encoder_makes(CaseName name)
    {
        JsonElement v = Case("valid", name);
        byte[] source = Hex(v, "source");
        byte[] target = Hex(v, "target");
        byte[] delta = Hex(v, "delta");

        Assert.Equal(Convert.ToHexStringLower(target), Convert.ToHexStringLower(FossilDelta.Apply(source, delta, MaxPayload)));
        byte[] made = new byte[delta.Length];
        Assert.True(FossilDelta.TryCreate(source, target, made, out int written));
        Assert.Equal(Convert.ToHexStringLower(delta), Convert.ToHexStringLower(made.AsSpan(0, written)));
    }

    [Theory]
    [MemberData(nameof(Invalid))]
    public void Invalid_delta_is_refused_with_its_error(CaseName name)
    {
        JsonElement v = Case("invalid", name);

        var e = Assert.Throws<ProtocolException>(() => FossilDelta.Apply(Hex(v, "source"), Hex(v, "delta"), MaxPayload));

        Assert.Equal(Enum.Parse<ErrorCode>(v.GetProperty("error").GetString()!), e.Code);
    }

    private static byte[] Hex(JsonElement v, string field) => Convert.FromHexString(v.GetProperty(field).GetString()!);

    private static JsonElement Case(string kind, CaseName name) =>
        File.Value.RootElement.GetProperty(kind).EnumerateArray().Single(c => c.GetProperty("name").GetString() == name.Value);

    private static TheoryData<CaseName> Names(string kind)
    {
        var data = new TheoryData<CaseName>();
        foreach (JsonElement c in File.Value.RootElement.GetProperty(kind).EnumerateArray())
        {
            data.Add(new CaseName(c.GetProperty("name").GetString()!));
        }

        return data;
    }
}
