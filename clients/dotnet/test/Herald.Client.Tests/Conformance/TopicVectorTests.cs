using System.Text.Json;
using Herald.Client.Protocol;
using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Client.Tests.Conformance;

/// <summary>
/// protocol-spec/vectors/topics.json through the client's own checks (<see cref="ClientTopics"/>), with
/// <c>max_topic</c> from limits.json: what the broker would refuse, the client refuses before sending,
/// with the same code; what the broker accepts, the client sends.
/// </summary>
public class TopicVectorTests
{
    private static readonly Lazy<JsonElement> Root = new(() => Vectors.File("topics.json"));

    public static TheoryData<CaseName> ValidNames => Labels("valid_names");

    public static TheoryData<CaseName> ValidPatterns => Labels("valid_patterns");

    public static TheoryData<CaseName> InvalidNames => Labels("invalid_names");

    public static TheoryData<CaseName> InvalidPatterns => Labels("invalid_patterns");

    public static TheoryData<CaseName> Reserved => Labels("reserved");

    [Theory]
    [MemberData(nameof(ValidNames))]
    public void Valid_name_is_sent_as_a_reply_to_and_a_pattern_and_as_a_topic_unless_reserved(CaseName label)
    {
        string name = Entry("valid_names", label).GetString()!;

        Assert.Equal(System.Text.Encoding.UTF8.GetBytes(name), ClientTopics.EncodeReplyTo(name, Vectors.MaxTopic));
        Assert.NotNull(ClientTopics.EncodePattern(name, Vectors.MaxTopic));
        if (name.StartsWith('$'))
        {
            Assert.Equal(ErrorCode.ReservedTopic, Assert.Throws<HeraldException>(() => ClientTopics.EncodeTopic(name, Vectors.MaxTopic)).ErrorCode);
        }
        else
        {
            Assert.NotNull(ClientTopics.EncodeTopic(name, Vectors.MaxTopic));
        }
    }

    [Theory]
    [MemberData(nameof(ValidPatterns))]
    public void Valid_pattern_is_subscribed(CaseName label) =>
        Assert.NotNull(ClientTopics.EncodePattern(Entry("valid_patterns", label).GetString()!, Vectors.MaxTopic));

    [Theory]
    [MemberData(nameof(InvalidNames))]
    public void Invalid_name_is_refused_before_sending_with_the_brokers_code(CaseName label)
    {
        JsonElement entry = Entry("invalid_names", label);
        string topic = entry.GetProperty("topic").GetString()!;
        var expected = Enum.Parse<ErrorCode>(entry.GetProperty("error").GetString()!);

        Assert.Equal(expected, Assert.Throws<HeraldException>(() => ClientTopics.EncodeTopic(topic, Vectors.MaxTopic)).ErrorCode);
        Assert.Equal(expected, Assert.Throws<HeraldException>(() => ClientTopics.EncodeReplyTo(topic, Vectors.MaxTopic)).ErrorCode);
    }

    [Theory]
    [MemberData(nameof(InvalidPatterns))]
    public void Invalid_pattern_is_refused_before_subscribing_with_the_brokers_code(CaseName label)
    {
        JsonElement entry = Entry("invalid_patterns", label);

        Assert.Equal(
            Enum.Parse<ErrorCode>(entry.GetProperty("error").GetString()!),
            Assert.Throws<HeraldException>(() => ClientTopics.EncodePattern(entry.GetProperty("pattern").GetString()!, Vectors.MaxTopic)).ErrorCode);
    }

    [Theory]
    [MemberData(nameof(Reserved))]
    public void Reserved_topic_is_not_published_but_may_be_a_reply_to(CaseName label)
    {
        JsonElement entry = Entry("reserved", label);
        string topic = entry.GetProperty("topic").GetString()!;

        if (entry.GetProperty("reserved").GetBoolean())
        {
            Assert.Equal(ErrorCode.ReservedTopic, Assert.Throws<HeraldException>(() => ClientTopics.EncodeTopic(topic, Vectors.MaxTopic)).ErrorCode);
        }
        else
        {
            Assert.NotNull(ClientTopics.EncodeTopic(topic, Vectors.MaxTopic));
        }

        Assert.NotNull(ClientTopics.EncodeReplyTo(topic, Vectors.MaxTopic));
    }

    private static JsonElement Entry(string section, CaseName label) => Root.Value.GetProperty(section)[int.Parse(label.Value.Split(':')[0], System.Globalization.CultureInfo.InvariantCulture)];

    /// <summary>"index: printable text" (topics hold control characters, which a test name cannot show).</summary>
    private static TheoryData<CaseName> Labels(string section)
    {
        var data = new TheoryData<CaseName>();
        int i = 0;
        foreach (JsonElement e in Root.Value.GetProperty(section).EnumerateArray())
        {
            string text = e.ValueKind == JsonValueKind.String ? e.GetString()! : e.ToString();
            data.Add(new CaseName($"{i++}: {new string([.. text.Select(ch => ch is >= ' ' and < (char)0x7f ? ch : '?')])}"));
        }

        return data;
    }
}
