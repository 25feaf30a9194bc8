using Microsoft.AspNetCore.SignalR;

namespace Herald.LoadTest.Peers.SignalR;

/// <summary>
/// The hub the SignalR target measures: a topic is a SignalR group. <see cref="Subscribe"/> completes once
/// the caller is in the group, so the client's <c>InvokeAsync</c> is the subscription's live barrier;
/// <see cref="Publish"/> is called with <c>SendAsync</c> (no completion sent back) and fans out to the
/// group as one message <c>m(topic, payload, replyTo)</c>, which SignalR serializes once per protocol
/// and writes to every member. The topic travels with each message because a group send carries no
/// subscription id: a client in several groups tells them apart by it.
/// <para>One hub instance per invocation (SignalR's default); invocations of one connection run one at a
/// time (MaximumParallelInvocationsPerClient 1), so one publisher's messages keep their order.</para>
/// </summary>
internal sealed class PubSubHub : Hub
{
    /// <summary>The client method every delivery invokes.</summary>
    public const string DeliveryMethod = "m";

    public Task Subscribe(string topic) => Groups.AddToGroupAsync(Context.ConnectionId, topic);

    public Task Publish(string topic, byte[] payload, string? replyTo) =>
        Clients.Group(topic).SendAsync(DeliveryMethod, topic, payload, replyTo);
}
