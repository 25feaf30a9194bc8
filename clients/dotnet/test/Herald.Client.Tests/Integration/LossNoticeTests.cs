using Herald.Client.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// A loss the broker could not prevent, told by subscription (spec §4.8, §6.3; cluster.md §13): a non-fatal
/// <c>MessagesDropped</c> with count 0 and <c>sids</c> names the subscriptions that may have lost messages (a cluster's
/// Redis shard was unreachable). Each named one raises <see cref="HeraldSubscription.Resumed"/> without recovery; the
/// others nothing; none ends, and the client raises no <see cref="HeraldClient.Error"/> for it.
/// </summary>
public class LossNoticeTests
{
    [Fact]
    public async Task Each_subscription_a_loss_notice_names_is_told_as_a_resume_that_did_not_recover_and_the_others_are_not()
    {
        using var broker = new FakeBroker();
        await using var client = new HeraldClient(broker.Url);
        var errors = new List<HeraldErrorEventArgs>();
        client.Error += (_, e) => errors.Add(e);
        await using FakeConnection connection = await broker.ConnectAsync(client);
        await using HeraldSubscription victim = await SubscribeAsync("orders.1");
        await using HeraldSubscription bystander = await SubscribeAsync("audit");
        var told = new List<HeraldResumeEventArgs>();
        var untold = new List<HeraldResumeEventArgs>();
        victim.Resumed += (_, e) => told.Add(e);
        bystander.Resumed += (_, e) => untold.Add(e);

        await connection.SendAsync(w => FrameWriter.WriteMessagesLost(w, "May have lost messages.", [victim.Sid]));
        await connection.SendAsync(w => FrameWriter.WriteMessage(w, bystander.Sid, "audit"u8, default, PayloadFlags.None, "after"u8)); // read after the notice

        HeraldMessage after = await bystander.ReadAsync(Wait.Token());
        Assert.Equal("after", after.GetString());
        HeraldResumeEventArgs resumed = Assert.Single(told);
        Assert.False(resumed.Recovered);
        Assert.Empty(untold);
        Assert.Empty(errors);
        Assert.Equal(ConnectionState.Connected, client.State);

        async Task<HeraldSubscription> SubscribeAsync(string pattern)
        {
            Task<HeraldSubscription> subscribing = client.SubscribeAsync(pattern);
            await connection.ExpectAsync(FrameType.Subscribe); // between two PINGs (a fenced SUBSCRIBE): each answered
            await connection.ExpectAsync(FrameType.Ping);
            await connection.SendAsync(FrameWriter.WritePong);
            await connection.SendAsync(FrameWriter.WritePong);
            return await subscribing.Within();
        }
    }
}
