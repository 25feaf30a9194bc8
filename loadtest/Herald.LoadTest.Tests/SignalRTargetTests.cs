using Herald.LoadTest.Targets;
using Herald.Testing;

namespace Herald.LoadTest.Tests;

/// <summary>
/// What the SignalR target adds to the shared contract (<see cref="TargetContractTests"/>): the raised message
/// size limit lets a publication of <see cref="ITarget.MaxPayload"/> through, the target says what serves
/// it, and a server that dies shows as the client's <see cref="IPubSubClient.Failure"/>.
/// </summary>
public class SignalRTargetTests
{
    [Theory]
    [InlineData("tcp", "websockets")]
    [InlineData("longpoll", "longpolling")]
    public async Task A_publication_of_the_largest_payload_arrives_intact(string transport, string signalRTransport)
    {
        await using ITarget server = await TargetContractTests.StartAsync("signalr", transport);
        Assert.Equal($"signalr/{signalRTransport}", server.Label);
        Assert.Contains("MessagePack", server.ServerDescription, StringComparison.Ordinal);
        Assert.Contains("signalr-server", server.ServerCommandLine, StringComparison.Ordinal);

        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        await using IPubSubClient subscriber = await server.ConnectAsync(0, timeout.Token);
        await using IPubSubClient publisher = await server.ConnectAsync(1, timeout.Token);
        var arrived = new TaskCompletionSource<byte[]>(TaskCreationOptions.RunContinuationsAsynchronously);
        await subscriber.SubscribeAsync("big", (payload, _, _) => arrived.TrySetResult(payload.ToArray()), timeout.Token);

        byte[] sent = new byte[server.MaxPayload];
        Random.Shared.NextBytes(sent);
        await publisher.PublishAsync("big", sent, cancellationToken: timeout.Token);
        await publisher.FlushAsync(timeout.Token);

        Assert.Equal(sent, await arrived.Task.WaitAsync(timeout.Token));
        Assert.Null(publisher.Failure);
    }

    [Theory]
    [InlineData("tcp")]
    [InlineData("longpoll")]
    public async Task A_server_that_dies_is_reported_as_the_clients_failure(string transport)
    {
        await using ITarget server = await TargetContractTests.StartAsync("signalr", transport);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        await using IPubSubClient client = await server.ConnectAsync(0, timeout.Token);
        await client.SubscribeAsync("t", (_, _, _) => { }, timeout.Token);
        Assert.Null(client.Failure);

        server.ServerProcess!.Kill();
        await Until.True(() => client.Failure is not null, "the client reports the dead server as its failure");

        client.Publish("t", "after"u8); // dropped, never blocks
        await client.FlushAsync(timeout.Token); // nothing will be sent any more: returns
    }
}
