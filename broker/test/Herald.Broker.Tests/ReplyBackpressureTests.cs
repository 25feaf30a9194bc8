using System.Buffers;
using Herald.Broker.Security;
using Herald.Broker.Sessions;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Tests;

/// <summary>
/// Every reply the broker owes a client counts against that client (spec §6.3): an attacker with a 4 KiB
/// receive buffer that sends frames each answered by a reply (PING, UNSUBSCRIBE of an unknown sid, a
/// denied PUBLISH, a SUBSCRIBE over the pattern limit, PUBLISHes over its rate) and never reads. The broker
/// holds it back (reads no more of its 48 MiB, far more than any socket and pipe buffer between them) with
/// what it queued for it within <c>MaxPendingReplies</c>, without closing it, while a bystander identity
/// carries on.
/// </summary>
public sealed class ReplyBackpressureTests
{
    public enum Reply
    {
        Pong,
        UnknownSubscription,
        PermissionDenied,
        TooManyTopics,
        RateLimited,
    }

    private const string AttackerToken = "attacker-token-0123456789";
    private const string BystanderToken = "bystander-token-0123456789";
    private const int MaxReplies = 64;
    private const int LargestReply = 512; // an ERROR frame with its message, well over the longest here
    private const int AttackBytes = 48 * 1024 * 1024;

    [Theory]
    [InlineData(Reply.Pong)]
    [InlineData(Reply.UnknownSubscription)]
    [InlineData(Reply.PermissionDenied)]
    [InlineData(Reply.TooManyTopics)]
    [InlineData(Reply.RateLimited)]
    public async Task A_client_that_asks_and_never_reads_is_held_back_within_its_bound_while_a_bystander_carries_on(Reply reply)
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Security.Auth.Mode = AuthMode.Token;
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "attacker", Sha256 = TestTokens.Sha256(AttackerToken), Permissions = { Publish = { "attacker.>" }, Subscribe = { "attacker.>" } } });
            o.Security.Auth.Tokens.Add(new TokenOptions { Name = "bystander", Sha256 = TestTokens.Sha256(BystanderToken), Permissions = { Publish = { "by.>" }, Subscribe = { "by.>" } } });
            o.Limits.MaxPendingReplies = MaxReplies;
            o.Limits.MaxTopics = 1; // the bystander's one pattern
            o.Limits.SubscriptionRatePerSecond = 0; // its replies hold the attacker back here, not its rate
            if (reply == Reply.RateLimited)
            {
                o.Limits.PublishRatePerSecond = 1;
                o.Limits.PublishBurst = 1;
            }
        });
        using MetricsProbe metrics = broker.Metrics();
        var clock = System.Diagnostics.Stopwatch.StartNew();
        SessionRegistry registry = broker.Services.GetRequiredService<SessionRegistry>();
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, "bystander", auth: BystanderToken);
        await bystander.SubscribeAsync(1, "by.feed");
        await bystander.PingPongAsync();

        await using var attacker = await ProtocolClient.OpenAsync(broker.Port, "attacker", receiveBufferSize: 4096, auth: AttackerToken);
        ProtocolSession session = registry.Sessions.Single(s => s.ClientName == "attacker");
        byte[] chunk = Chunk(reply);
        long[] sent = [0]; // bytes the attacker's writes have handed to its socket
        using var stop = new CancellationTokenSource();
        Task attack = Task.Run(async () =>
        {
            while (Interlocked.Read(ref sent[0]) < AttackBytes)
            {
                await attacker.SendRawAsync(chunk, stop.Token);
                Interlocked.Add(ref sent[0], chunk.Length);
            }
        });

        // Held back: the attacker's writes stop moving across a barrier (the bystander's round trips, which
        // also show its traffic flowing meanwhile) while its replies are at their bound (or, over its publish
        // rate, the broker is pausing it). Without the bound the broker keeps reading: its writes never stop.
        bool held = false;
        var deadline = System.Diagnostics.Stopwatch.StartNew();
        while (!held && !attack.IsCompleted && deadline.Elapsed < TimeSpan.FromSeconds(60))
        {
            long before = Interlocked.Read(ref sent[0]);
            await RoundTripsAsync(bystander, reply == Reply.RateLimited ? 3 : 20); // under a publish rate of 1/s, held to it too, on its own account
            held = Interlocked.Read(ref sent[0]) == before && before > 0 && (reply == Reply.RateLimited
                ? metrics["herald.protocol.errors", "error.type", "RateLimited"] >= 1 && session.Throttle > TimeSpan.Zero
                : session.Backlog.PendingReplies >= MaxReplies);
        }

        Assert.True(held, $"the broker kept reading from a client that does not read its replies ({Interlocked.Read(ref sent[0])} bytes taken), {session.Backlog.PendingReplies} replies pending)");
        (long frames, long bytes) = session.Backlog.Pending;
        Assert.InRange(frames, 0, MaxReplies + 1);
        Assert.InRange(bytes, 0, (MaxReplies + 1) * LargestReply);
        Assert.False(session.IsClosing, "held back, not closed");
        if (reply == Reply.RateLimited)
        {
            // Held per message: each client, at 1/s and burst 1, got at most 2 + T of its publishes routed.
            Assert.InRange(metrics["herald.messages.published"], 1, 2 * (2 + clock.Elapsed.TotalSeconds));
        }

        // The attacker leaves; the bystander is still served. One held back by its replies is let go at once
        // (its replies can no longer be written); one held to its publish rate still has what it sent, and
        // what the broker had read of it is routed at that rate (nothing sent is dropped, spec §8).
        await stop.CancelAsync();
        await attacker.DisposeAsync();
        await Assert.ThrowsAnyAsync<Exception>(() => attack);
        if (reply != Reply.RateLimited)
        {
            await Until.True(() => !registry.Sessions.Contains(session), "the session is gone from the registry");
        }

        await bystander.PublishAsync("by.feed", "after");
        Assert.Equal("after", (await ReadMessageAsync(bystander)).Text);
    }

    private static async Task RoundTripsAsync(ProtocolClient bystander, int count)
    {
        for (int i = 0; i < count; i++)
        {
            await bystander.PublishAsync("by.feed", $"m{i}");
            Assert.Equal($"m{i}", (await ReadMessageAsync(bystander)).Text);
        }
    }

    /// <summary>The next MESSAGE, past the bystander's own RateLimited notices.</summary>
    private static async Task<Frame> ReadMessageAsync(ProtocolClient client)
    {
        Frame frame = await client.ReadAsync();
        while (frame.Error is { Code: ErrorCode.RateLimited, Fatal: false })
        {
            frame = await client.ReadAsync();
        }

        Assert.True(frame.Type == FrameType.Message, $"Expected MESSAGE, got {frame}");
        return frame;
    }

    /// <summary>64 KiB or so of frames, each answered by a reply of the kind asked for.</summary>
    private static byte[] Chunk(Reply reply)
    {
        var writer = new ArrayBufferWriter<byte>();
        while (writer.WrittenCount < 64 * 1024)
        {
            switch (reply)
            {
                case Reply.Pong:
                    FrameWriter.WritePing(writer);
                    break;
                case Reply.UnknownSubscription:
                    FrameWriter.WriteUnsubscribe(writer, 7);
                    break;
                case Reply.PermissionDenied:
                    FrameWriter.WritePublish(writer, "by.feed"u8, default, PayloadFlags.None, "forged"u8);
                    break;
                case Reply.TooManyTopics:
                    FrameWriter.WriteSubscribe(writer, 5, "attacker.topic"u8);
                    break;
                case Reply.RateLimited:
                    FrameWriter.WritePublish(writer, "attacker.flood"u8, default, PayloadFlags.None, "x"u8);
                    break;
            }
        }

        return writer.WrittenSpan.ToArray();
    }
}
