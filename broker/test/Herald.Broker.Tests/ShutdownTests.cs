using System.Net;
using System.Net.WebSockets;
using Herald.Broker.Sessions;
using Herald.Broker.Tests.Infrastructure;
using Herald.Broker.Transports.LongPoll;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

/// <summary>The stop (README "Shutdown", spec §6.4): drain delay, input stopped, queues drained, then the listeners closed.</summary>
public sealed class ShutdownTests
{
    [Theory]
    [InlineData("tcp")]
    [InlineData("websocket")]
    public async Task Graceful_shutdown_delivers_what_was_queued_then_says_goodbye(string transport)
    {
        const int Messages = 4000;
        await using var broker = await TestBroker.StartAsync(o => o.Limits.ShutdownDrainTimeout = TimeSpan.FromSeconds(20));
        await using ProtocolClient subscriber = await OpenAsync(broker, transport, "sub");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "pub");
        await subscriber.SubscribeAsync(1, "work");
        await subscriber.PingPongAsync();

        // ~4 MiB: more than the stalled subscriber's socket buffers hold, so most of it waits in the broker's queue.
        byte[] payload = new byte[1024];
        await publisher.SendAsync(w =>
        {
            for (int i = 0; i < Messages; i++)
            {
                BitConverter.TryWriteBytes(payload, i);
                FrameWriter.WritePublish(w, "work"u8, default, PayloadFlags.None, payload);
            }
        });
        await publisher.PingPongAsync(); // all routed and queued before the stop begins

        Task stopping = broker.StopAsync();
        List<Frame> frames = await subscriber.ReadUntilClosedAsync();
        await stopping;

        Assert.Equal(Messages + 1, frames.Count);
        for (int i = 0; i < Messages; i++)
        {
            Assert.Equal(i, BitConverter.ToInt32(frames[i].Payload));
        }

        Assert.Equal(ErrorCode.ShuttingDown, frames[^1].Error!.Value.Code);
        Assert.True(frames[^1].Error!.Value.Fatal);
        if (subscriber.WebSocket is { } socket)
        {
            Assert.Equal(WebSocketState.CloseReceived, socket.State); // the broker's close came right after the error
            Assert.Equal(WebSocketCloseStatus.NormalClosure, socket.CloseStatus);
        }
    }

    private static async Task<ProtocolClient> OpenAsync(TestBroker broker, string transport, string name)
    {
        if (transport == "tcp")
        {
            return await ProtocolClient.OpenAsync(broker.Port, name, receiveBufferSize: 4096);
        }

        ProtocolClient web = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await web.HelloAsync(name);
        return web;
    }

    [Fact]
    public async Task An_idle_connection_does_not_hold_up_shutdown()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.ShutdownDrainTimeout = TimeSpan.FromMinutes(10));
        await using var idle = await ProtocolClient.OpenAsync(broker.Port);

        // A hang guard, not a timing assertion: an idle connection that held up shutdown would keep the
        // stop waiting for the whole 10 min drain timeout, far past this bound.
        await broker.StopAsync().WaitAsync(TimeSpan.FromSeconds(60));

        await idle.ExpectClosedWithAsync(ErrorCode.ShuttingDown);
    }

    [Fact]
    public async Task Every_publication_the_broker_took_reaches_every_subscriber_or_none()
    {
        const int Subscribers = 4;
        const int Batch = 200;
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.ShutdownDrainTimeout = TimeSpan.FromSeconds(60);
            o.Limits.MaxPendingMessages = 10_000_000; // whatever the stream queues by the stop, no subscriber is a slow consumer
            o.Limits.MaxPendingBytes = 256 << 20;
        });
        var subscribers = new List<ProtocolClient>();
        for (int i = 0; i < Subscribers; i++)
        {
            ProtocolClient subscriber = await ProtocolClient.OpenAsync(broker.Port, $"sub{i}");
            await subscriber.SubscribeAsync(1, "stream");
            await subscriber.PingPongAsync();
            subscribers.Add(subscriber);
        }

        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "pub");
        Task<List<Frame>>[] reading = [.. subscribers.Select(s => s.ReadUntilClosedAsync(TimeSpan.FromSeconds(60)))];

        // The publisher streams numbered messages, batch after batch, each closed by a PING; its PONG confirms
        // the batch was taken. The stop begins once the stream runs, while the broker is busy routing it.
        int confirmed = 0;
        var streamingFor = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        Task sending = Task.Run(async () =>
        {
            byte[] payload = new byte[8];
            try
            {
                for (int first = 0; ; first += Batch)
                {
                    await publisher.SendAsync(w =>
                    {
                        for (int i = first; i < first + Batch; i++)
                        {
                            BitConverter.TryWriteBytes(payload, i);
                            FrameWriter.WritePublish(w, "stream"u8, default, PayloadFlags.None, payload);
                        }

                        FrameWriter.WritePing(w);
                    });
                }
            }
            catch (IOException)
            {
                // closed by the broker
            }
        });
        Task confirming = Task.Run(async () =>
        {
            while (await publisher.TryReadAsync(TimeSpan.FromSeconds(60)) is { Type: FrameType.Pong })
            {
                confirmed += Batch;
                if (confirmed == 100 * Batch)
                {
                    streamingFor.TrySetResult();
                }
            }
        });
        await streamingFor.Task.WaitAsync(TimeSpan.FromSeconds(60));

        Task stopping = broker.StopAsync();
        await Task.WhenAll(sending, confirming).WaitAsync(TimeSpan.FromSeconds(60));
        List<Frame>[] received = await Task.WhenAll(reading).WaitAsync(TimeSpan.FromSeconds(90));
        await stopping;

        int[] counts = [.. received.Select(frames => frames.Count(f => f.Type == FrameType.Message))];
        Assert.True(counts.Distinct().Count() == 1, $"the subscribers received different counts: {string.Join(", ", counts)}");
        Assert.True(counts[0] >= confirmed, $"{counts[0]} delivered, fewer than the {confirmed} publications confirmed by PONG");
        foreach (List<Frame> frames in received)
        {
            Assert.Equal(ErrorCode.ShuttingDown, frames[^1].Error!.Value.Code);
            Assert.Equal(Enumerable.Range(0, counts[0]), frames.Where(f => f.Type == FrameType.Message).Select(f => BitConverter.ToInt32(f.Payload)));
        }

        foreach (ProtocolClient subscriber in subscribers)
        {
            await subscriber.DisposeAsync();
        }
    }

    [Fact]
    public async Task During_the_drain_delay_clients_carry_on_then_queues_drain_while_health_still_answers()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Monitoring.DrainDelay = TimeSpan.FromSeconds(4);
            o.Limits.ShutdownDrainTimeout = TimeSpan.FromSeconds(60);
        });
        await using var client = await ProtocolClient.OpenAsync(broker.Port, "client");
        await client.SubscribeAsync(1, "chat");
        await client.PingPongAsync();

        // A subscriber that does not read holds the drain: ~4 MiB wait in its queue.
        await using var stalled = await ProtocolClient.OpenAsync(broker.Port, "stalled", receiveBufferSize: 4096);
        await stalled.SubscribeAsync(1, "bulk");
        await stalled.PingPongAsync();
        await using (var bulk = await ProtocolClient.OpenAsync(broker.Port, "bulk"))
        {
            await bulk.SendAsync(w =>
            {
                for (int i = 0; i < 4000; i++)
                {
                    FrameWriter.WritePublish(w, "bulk"u8, default, PayloadFlags.None, new byte[1024]);
                }
            });
            await bulk.PingPongAsync();
        }

        using var monitoring = new HttpClient { BaseAddress = broker.Monitoring.BaseAddress };
        Task stopping = broker.StopAsync();
        await Until.True(async () => (await monitoring.GetAsync("/readyz")).StatusCode == HttpStatusCode.ServiceUnavailable, "/readyz answers 503");

        // The delay: readiness says 503, yet connected clients publish and receive, and a new one is welcomed.
        await client.PublishAsync("chat", "still here");
        List<Frame> echoed = await client.PingPongAsync();
        Assert.Equal("still here", Assert.Single(echoed).Text);
        await using (var late = await ProtocolClient.OpenAsync(broker.Port, "late"))
        {
            await late.PingPongAsync();
        }

        Assert.False(stopping.IsCompleted);

        // Then the drain: clients are told ShuttingDown; the stalled one's queue keeps the stop open, and
        // liveness still answers on the monitoring listener meanwhile.
        await client.ExpectClosedWithAsync(ErrorCode.ShuttingDown);
        using (HttpResponseMessage alive = await monitoring.GetAsync("/healthz"))
        {
            Assert.Equal(HttpStatusCode.OK, alive.StatusCode);
        }

        Assert.False(stopping.IsCompleted);
        List<Frame> drained = await stalled.ReadUntilClosedAsync();
        Assert.Equal(4000, drained.Count(f => f.Type == FrameType.Message));
        Assert.Equal(ErrorCode.ShuttingDown, drained[^1].Error!.Value.Code);
        await stopping;
        await Assert.ThrowsAsync<HttpRequestException>(() => monitoring.GetAsync("/healthz"));
    }

    [Fact]
    public async Task A_long_poll_session_takes_what_was_queued_before_it_ends_and_publishes_are_refused_meanwhile()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.ShutdownDrainTimeout = TimeSpan.FromSeconds(60));
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        await client.SubscribeAsync(1, "news");
        for (int i = 0; i < 3; i++)
        {
            using HttpResponseMessage published = await client.PublishAsync("news", $"m{i}");
            Assert.Equal(HttpStatusCode.Accepted, published.StatusCode);
        }

        Task stopping = broker.StopAsync();
        PollSession session = broker.Services.GetRequiredService<PollSessionStore>().Find(client.Session)!;
        await Until.True(() => session.IsClosing, "the session is closing");

        using (HttpResponseMessage refused = await client.PublishAsync("news", "too late"))
        {
            Assert.Equal(HttpStatusCode.ServiceUnavailable, refused.StatusCode);
        }

        PollResult poll = await client.PollAsync(0);
        Assert.Equal(HttpStatusCode.OK, poll.Status);
        Assert.Equal(["m0", "m1", "m2"], poll.Messages.Select(m => m.Text));
        Assert.False(stopping.IsCompleted);

        PollResult last = await client.PollAsync(poll.LastSequence);
        Assert.Equal(HttpStatusCode.ServiceUnavailable, last.Status);
        Assert.Equal("ShuttingDown", last.Code);
        await stopping.WaitAsync(TimeSpan.FromSeconds(30)); // a hang guard: the session's end let the stop finish
        Assert.Equal(0, broker.Services.GetRequiredService<SessionRegistry>().Count);
    }

    [Fact]
    public async Task A_long_poll_client_that_leaves_during_the_drain_does_not_hold_up_the_stop()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Limits.ShutdownDrainTimeout = TimeSpan.FromMinutes(10));
        LongPollClient client = await LongPollClient.CreateAsync(broker.Http);
        await client.SubscribeAsync(1, "news");
        using (HttpResponseMessage published = await client.PublishAsync("news", "never polled"))
        {
            Assert.Equal(HttpStatusCode.Accepted, published.StatusCode);
        }

        Task stopping = broker.StopAsync();
        PollSession session = broker.Services.GetRequiredService<PollSessionStore>().Find(client.Session)!;
        await Until.True(() => session.IsClosing, "the session is closing");
        using (HttpResponseMessage left = await broker.Http.DeleteAsync(client.Base))
        {
            Assert.Equal(HttpStatusCode.NoContent, left.StatusCode);
        }

        // A hang guard, not a timing assertion: a session kept for its queue would hold the stop for the 10 min drain timeout.
        await stopping.WaitAsync(TimeSpan.FromSeconds(60));
    }
}
