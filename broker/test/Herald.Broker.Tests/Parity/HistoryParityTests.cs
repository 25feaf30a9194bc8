using System.Text.Json;
using Herald.Broker.History;
using Herald.Broker.Hosting;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using Xunit.Abstractions;

namespace Herald.Broker.Tests.Parity;

/// <summary>
/// Resumes (spec §13) on every transport that has one, through the parity adapters: what another identity's
/// reads may cost the histories others keep. A resume reads; it never makes or evicts a history.
/// </summary>
public sealed class HistoryParityTests(ITestOutputHelper output)
{
    private const string AliceToken = "alice-token-0123456789";
    private const string MalloryToken = "mallory-token-0123456789";
    private const string ReaderToken = "reader-token-0123456789";
    private const int MaxTopics = 8;

    [Theory]
    [MemberData(nameof(TransportClient.Transports), MemberType = typeof(TransportClient))]
    public async Task Resumes_refused_or_read_only_create_no_history_and_evict_none_and_alices_resumes(string transport)
    {
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.History.Topics.Add(new HistoryRule { Pattern = "orders.>", MaxMessages = 100 });
            o.History.MaxTopics = MaxTopics;
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.FailureDelay = TimeSpan.Zero;
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "alice", Sha256 = TestTokens.Sha256(AliceToken), Permissions = { Publish = { "orders.>" }, Subscribe = { "orders.>" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "mallory", Sha256 = TestTokens.Sha256(MalloryToken) }); // no permission at all
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "reader", Sha256 = TestTokens.Sha256(ReaderToken), Permissions = { Subscribe = { "orders.public.>" } } });
        });
        HistoryStore store = broker.Services.GetRequiredService<HistorySlot>().Store!;
        await using var alice = await ProtocolClient.OpenAsync(broker.Port, "alice", capabilities: Capabilities.Headers, auth: AliceToken);
        await alice.SubscribeAsync(1, "orders.important");
        await alice.PublishAsync("orders.important", "m1");
        StreamPosition kept = (await alice.ReadMessageAsync()).Position!.Value;
        Assert.Equal(1, store.TopicCount);

        await using TransportClient mallory = await TransportClient.OpenAsync(transport, broker, MalloryToken, headers: true);
        await using TransportClient reader = await TransportClient.OpenAsync(transport, broker, ReaderToken, headers: true);
        for (uint i = 1; i <= 3 * MaxTopics; i++)
        {
            Assert.Equal(new Answer(ErrorCode.PermissionDenied, SessionEnded: false), await mallory.ResumeAsync(i, $"orders.m{i}", new StreamPosition(0, "0000000000000000")));
            Assert.Equal(Answer.Ok, await reader.ResumeAsync(i, $"orders.public.r{i}", new StreamPosition(0, "0000000000000000")));
        }

        using JsonDocument varz = JsonDocument.Parse(await broker.Monitoring.GetStringAsync("/varz"));
        JsonElement history = varz.RootElement.GetProperty("history");
        output.WriteLine($"{transport}: after {3 * MaxTopics} refused and {3 * MaxTopics} read-only resumes: topics {store.TopicCount} (max {MaxTopics}), evicted {store.EvictedTopics}");
        Assert.Equal((1, 0), (history.GetProperty("topics").GetInt32(), history.GetProperty("evicted_topics").GetInt32()));

        // alice's history is whole: a resume from before her next publication gets it, and the live stream goes on.
        await alice.PublishAsync("orders.important", "m2");
        Assert.Equal("m2", (await alice.ReadMessageAsync()).Text); // the bystander's traffic carried on
        await using var back = await ProtocolClient.OpenAsync(broker.Port, "alice-back", capabilities: Capabilities.Headers, auth: AliceToken);
        await back.SubscribeAsync(7, "orders.important", kept);
        Frame status = await back.ReadMessageAsync();
        Assert.Equal(("200", "Recovered"), (status.Status, status.Header(StreamPosition.DescriptionHeader)[0]));
        Frame replayed = await back.ReadMessageAsync();
        Assert.Equal(("m2", 2ul, 7u), (replayed.Text, replayed.Position!.Value.Offset, replayed.Sid));
    }
}
