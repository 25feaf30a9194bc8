using Herald.Broker.Cluster;

namespace Herald.Broker.Tests;

/// <summary>
/// The Redis subscriptions a cluster node makes for its patterns (spec cluster.md §2): one key per pattern,
/// exact or the literal prefix before the first wildcard, and a prefix-free cover of them, so no topic
/// matches two of a node's Redis subscriptions. The spec's cases are in <see cref="ClusterVectorTests"/>;
/// these follow one cover through changes.
/// </summary>
public sealed class InterestCoverTests
{
    [Fact]
    public void The_cover_leaves_out_every_key_a_shorter_prefix_covers()
    {
        var cover = new InterestCover();
        foreach (string pattern in new[] { "a.b.c", "a.b.*", "a.b.x.>", "a.bc", "ab.>", "z.q" })
        {
            cover.Add(pattern);
        }

        Assert.Equal(
            new HashSet<CoverKey> { new("a.b.", true), new("a.bc", false), new("ab.", true), new("z.q", false) },
            cover.Compute()); // a.b.c and a.b.x. are under a.b.; "a.bc" and "ab." are not (token boundaries)

        cover.Add("*.q");
        Assert.Equal(new HashSet<CoverKey> { new("", true) }, cover.Compute()); // a leading wildcard: every topic

        cover.Remove("*.q");
        cover.Remove("a.b.*");
        Assert.Equal(
            new HashSet<CoverKey> { new("a.b.c", false), new("a.b.x.", true), new("a.bc", false), new("ab.", true), new("z.q", false) },
            cover.Compute()); // narrowed again: the keys the glob hid come back
    }

    [Fact]
    public void A_key_counts_its_patterns_and_goes_with_the_last()
    {
        var cover = new InterestCover();
        cover.Add("a.*");
        cover.Add("a.>"); // the same key
        cover.Remove("a.*");
        Assert.Equal(new HashSet<CoverKey> { new("a.", true) }, cover.Compute());
        cover.Remove("a.>");
        Assert.Empty(cover.Compute());
        cover.Remove("never.added"); // ignored
        Assert.Equal(0, cover.KeyCount);
    }

    [Fact]
    public void Keys_under_one_inbox_past_the_limit_are_its_one_glob_and_come_back_apart_below_it()
    {
        var cover = new InterestCover(maxKeysPerInbox: 3);
        for (int i = 0; i < 1000; i++)
        {
            cover.Add($"_INBOX.mallory.p{i}.*");
            cover.Add($"_INBOX.mallory.e{i}");
        }

        cover.Add("_INBOX.alice.r1.>");
        Assert.Equal(new HashSet<CoverKey> { new("_INBOX.mallory.", true), new("_INBOX.alice.r1.", true) }, cover.Compute());

        for (int i = 3; i < 1000; i++)
        {
            cover.Remove($"_INBOX.mallory.p{i}.*");
            cover.Remove($"_INBOX.mallory.e{i}");
        }

        cover.Remove("_INBOX.mallory.e0");
        cover.Remove("_INBOX.mallory.e1");
        Assert.Equal(new HashSet<CoverKey> { new("_INBOX.mallory.", true), new("_INBOX.alice.r1.", true) }, cover.Compute()); // four keys: still past three

        cover.Remove("_INBOX.mallory.e2");
        Assert.Equal(
            new HashSet<CoverKey> { new("_INBOX.mallory.p0.", true), new("_INBOX.mallory.p1.", true), new("_INBOX.mallory.p2.", true), new("_INBOX.alice.r1.", true) },
            cover.Compute()); // three: each its own again
    }

    [Theory]
    [InlineData("a.b", "a.b", false, true)]
    [InlineData("a.b", "a.bc", false, false)]
    [InlineData("a.", "a.b.c", true, true)]
    [InlineData("a.", "ab.c", true, false)]
    [InlineData("", "anything", true, true)]
    public void A_key_matches_topics_as_Redis_would(string literal, string topic, bool isPrefix, bool matches)
    {
        Assert.Equal(matches, new CoverKey(literal, isPrefix).Matches(System.Text.Encoding.ASCII.GetBytes(topic)));
    }
}
