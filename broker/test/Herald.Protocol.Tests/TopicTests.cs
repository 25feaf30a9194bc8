using System.Globalization;
using System.Text;
using System.Text.Json;
using Xunit;

namespace Herald.Protocol.Tests;

/// <summary>
/// Runs <c>protocol-spec/vectors/topics.json</c> (spec §5) through <see cref="Topic"/>, with <c>max_topic</c>
/// from <c>limits.json</c>. A theory argument is a printable label whose leading number indexes the table.
/// </summary>
public class TopicTests
{
    public static TheoryData<CaseName> ValidNames => Labels("valid_names", e => e.GetString()!);

    public static TheoryData<CaseName> ValidPatterns => Labels("valid_patterns", e => e.GetString()!);

    public static TheoryData<CaseName> InvalidNames => Labels("invalid_names", e => $"{e.GetProperty("topic").GetString()} -> {e.GetProperty("error").GetString()}");

    public static TheoryData<CaseName> InvalidPatterns => Labels("invalid_patterns", e => $"{e.GetProperty("pattern").GetString()} -> {e.GetProperty("error").GetString()}");

    public static TheoryData<CaseName> MatchTable => Labels("matches", e => $"{e.GetProperty("pattern").GetString()} ~ {e.GetProperty("topic").GetString()} -> {e.GetProperty("matches").GetBoolean()}");

    public static TheoryData<CaseName> ReservedMatchTable => Labels("reserved_matches", e => $"{e.GetProperty("pattern").GetString()} ~ {e.GetProperty("topic").GetString()} -> {e.GetProperty("matches").GetBoolean()}");

    public static TheoryData<CaseName> ReservedTable => Labels("reserved", e => $"{e.GetProperty("topic").GetString()} -> {e.GetProperty("reserved").GetBoolean()}");

    private static int MaxTopic => VectorCatalog.MaxTopic;

    [Theory]
    [MemberData(nameof(ValidNames))]
    public void Valid_name_is_a_valid_name_and_pattern(CaseName label)
    {
        byte[] name = Utf8(Entry("valid_names", label));

        Assert.Equal(ErrorCode.None, Topic.ValidateName(name, MaxTopic));
        Assert.Equal(ErrorCode.None, Topic.ValidatePattern(name, MaxTopic));
        Assert.False(Topic.HasWildcard(name));
    }

    [Theory]
    [MemberData(nameof(ValidPatterns))]
    public void Valid_pattern_is_a_valid_pattern(CaseName label)
    {
        byte[] pattern = Utf8(Entry("valid_patterns", label));

        Assert.Equal(ErrorCode.None, Topic.ValidatePattern(pattern, MaxTopic));
    }

    [Theory]
    [MemberData(nameof(InvalidNames))]
    public void Invalid_name_is_refused_with_its_error_code(CaseName label)
    {
        JsonElement entry = Entry("invalid_names", label);
        byte[] name = Utf8(entry.GetProperty("topic"));
        ErrorCode expected = Enum.Parse<ErrorCode>(entry.GetProperty("error").GetString()!);

        Assert.Equal(expected, Topic.ValidateName(name, MaxTopic));
        var e = Assert.Throws<ProtocolException>(() => Topic.EncodeName(entry.GetProperty("topic").GetString()!, MaxTopic));
        Assert.Equal(expected, e.Code);
    }

    [Theory]
    [MemberData(nameof(InvalidPatterns))]
    public void Invalid_pattern_is_refused_as_a_pattern_and_as_a_name(CaseName label)
    {
        JsonElement entry = Entry("invalid_patterns", label);
        byte[] pattern = Utf8(entry.GetProperty("pattern"));
        ErrorCode expected = Enum.Parse<ErrorCode>(entry.GetProperty("error").GetString()!);

        Assert.Equal(expected, Topic.ValidatePattern(pattern, MaxTopic));
        Assert.Equal(expected, Topic.ValidateName(pattern, MaxTopic)); // every name is a pattern, so no bad pattern is a good name
        var e = Assert.Throws<ProtocolException>(() => Topic.EncodePattern(entry.GetProperty("pattern").GetString()!, MaxTopic));
        Assert.Equal(expected, e.Code);
    }

    [Theory]
    [MemberData(nameof(MatchTable))]
    public void Pattern_matches_topic_as_the_table_says(CaseName label) => AssertMatch("matches", label, reserved: false);

    /// <summary>How patterns match the broker's own '$' topics (spec §5): with a matcher alone, since no client can publish there.</summary>
    [Theory]
    [MemberData(nameof(ReservedMatchTable))]
    public void Pattern_matches_a_reserved_topic_as_the_table_says(CaseName label) => AssertMatch("reserved_matches", label, reserved: true);

    [Theory]
    [MemberData(nameof(ReservedTable))]
    public void Reserved_topics_are_those_starting_with_a_dollar(CaseName label)
    {
        JsonElement entry = Entry("reserved", label);
        byte[] topic = Utf8(entry.GetProperty("topic"));

        Assert.Equal(ErrorCode.None, Topic.ValidateName(topic, MaxTopic));
        Assert.Equal(entry.GetProperty("reserved").GetBoolean(), Topic.IsReserved(topic));
    }

    [Fact]
    public void Table_has_no_duplicate_rows()
    {
        foreach (JsonProperty table in VectorCatalog.Topics.EnumerateObject().Where(p => p.Value.ValueKind == JsonValueKind.Array))
        {
            var rows = table.Value.EnumerateArray().Select(e => e.GetRawText()).ToList();
            Assert.True(rows.Count == rows.Distinct(StringComparer.Ordinal).Count(), $"topics.json {table.Name} has duplicate rows.");
        }
    }

    /// <summary>A row of a match table: a valid pattern, a valid topic (reserved or not, as its table says) and the answer.</summary>
    private static void AssertMatch(string table, CaseName label, bool reserved)
    {
        JsonElement entry = Entry(table, label);
        string pattern = entry.GetProperty("pattern").GetString()!;
        string topic = entry.GetProperty("topic").GetString()!;

        Assert.Equal(ErrorCode.None, Topic.ValidatePattern(Encoding.UTF8.GetBytes(pattern), MaxTopic));
        Assert.Equal(ErrorCode.None, Topic.ValidateName(Encoding.UTF8.GetBytes(topic), MaxTopic));
        Assert.True(reserved == Topic.IsReserved(Encoding.UTF8.GetBytes(topic)), $"topics.json {table}: '{topic}' belongs in {(reserved ? "matches" : "reserved_matches")}");
        Assert.Equal(entry.GetProperty("matches").GetBoolean(), Topic.Matches(pattern, topic));
    }

    private static TheoryData<CaseName> Labels(string table, Func<JsonElement, string> describe)
    {
        var data = new TheoryData<CaseName>();
        int i = 0;
        foreach (JsonElement entry in VectorCatalog.Topics.GetProperty(table).EnumerateArray())
        {
            data.Add(new CaseName($"{i++}: {Printable(describe(entry))}"));
        }

        return data;
    }

    private static JsonElement Entry(string table, CaseName label) =>
        VectorCatalog.Topics.GetProperty(table)[int.Parse(label.Value[..label.Value.IndexOf(':', StringComparison.Ordinal)], CultureInfo.InvariantCulture)];

    private static byte[] Utf8(JsonElement value) => Encoding.UTF8.GetBytes(value.GetString()!);

    /// <summary>Shows control and non-ASCII characters as \uXXXX so every case name is plain text.</summary>
    private static string Printable(string value)
    {
        var sb = new StringBuilder(value.Length);
        foreach (char c in value)
        {
            if (c is >= ' ' and <= '~')
            {
                sb.Append(c);
            }
            else
            {
                sb.Append(CultureInfo.InvariantCulture, $"\\u{(int)c:x4}");
            }
        }

        return sb.ToString();
    }
}
