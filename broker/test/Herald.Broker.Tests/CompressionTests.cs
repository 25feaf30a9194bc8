using System.Net;
using System.Net.Http.Json;
using Herald.Broker.Compression;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using ZstdSharp;

namespace Herald.Broker.Tests;

/// <summary>The advisor's policy, in-process with an injected CPU reading and clock.</summary>
public sealed class CompressionAdvisorTests
{
    private readonly CompressionOptions _options = new() { WarmupSamples = 3, ProbeEveryMessages = 10, ProbeInterval = TimeSpan.FromSeconds(10) };
    private readonly FixedCpu _cpu = new();
    private readonly ManualTime _time = new();

    [Fact]
    public void Small_messages_are_never_compressed()
    {
        var advisor = new CompressionAdvisor(_options, _cpu, _time);

        Assert.Equal(CompressionDecision.TooSmall, advisor.Decide("t", _options.NoCompressionLimit - 1, out _));
        Assert.Equal(CompressionDecision.Compress, advisor.Decide("t", _options.NoCompressionLimit, out _));
    }

    [Fact]
    public void Levels_follow_the_size_thresholds()
    {
        var advisor = new CompressionAdvisor(_options, _cpu, _time);

        advisor.Decide("t", 2_000, out int fast);
        advisor.Decide("t", 50_000, out int normal);
        advisor.Decide("t", 200_000, out int max);

        Assert.Equal((_options.FastLevel, _options.NormalLevel, _options.MaxLevel), (fast, normal, max));
    }

    [Fact]
    public void An_incompressible_action_is_switched_off_after_warm_up_probed_and_switched_back_on()
    {
        var advisor = new CompressionAdvisor(_options, _cpu, _time);
        for (int i = 0; i < _options.WarmupSamples; i++)
        {
            Assert.Equal(CompressionDecision.Compress, advisor.Decide("noise", 150_000, out _));
            advisor.Record("noise", 150_000, 150_100);
        }

        // Off: skipped until the N-th message, which is a probe.
        for (int i = 1; i < _options.ProbeEveryMessages; i++)
        {
            Assert.Equal(CompressionDecision.Incompressible, advisor.Decide("noise", 150_000, out _));
        }

        Assert.Equal(CompressionDecision.Probe, advisor.Decide("noise", 150_000, out _));
        advisor.Record("noise", 150_000, 150_100);
        Assert.Equal(CompressionDecision.Incompressible, advisor.Decide("noise", 150_000, out _));

        // Time also triggers a probe; the content has turned compressible, so the action comes back on.
        _time.Advance(_options.ProbeInterval);
        Assert.Equal(CompressionDecision.Probe, advisor.Decide("noise", 150_000, out _));
        advisor.Record("noise", 150_000, 10_000);
        Assert.Equal(CompressionDecision.Compress, advisor.Decide("noise", 150_000, out _));

        // Other actions and other size buckets of the same action keep their own statistics.
        Assert.Equal(CompressionDecision.Compress, advisor.Decide("other", 150_000, out _));
        Assert.Null(advisor.Ratio("noise", 2_000));
    }

    [Fact]
    public void A_busy_cpu_backs_off_progressively_then_stops_compression()
    {
        var advisor = new CompressionAdvisor(_options, _cpu, _time);

        _cpu.Value = _options.CpuBackoffStart - 0.01;
        int calm = CountCompressed(advisor, 1000);
        _cpu.Value = (_options.CpuBackoffStart + _options.CpuDisableLimit) / 2;
        int halfway = CountCompressed(advisor, 1000);
        _cpu.Value = _options.CpuDisableLimit;
        int busy = CountCompressed(advisor, 1000);

        Assert.Equal(1000, calm);
        Assert.InRange(halfway, 350, 650);
        Assert.Equal(0, busy);
        Assert.Equal(CompressionDecision.CpuBusy, advisor.Decide("t", 10_000, out _));
    }

    [Fact]
    public void With_both_cpu_limits_at_1_compression_never_yields_to_the_cpu()
    {
        _options.CpuBackoffStart = 1;
        _options.CpuDisableLimit = 1;
        var advisor = new CompressionAdvisor(_options, _cpu, _time);

        _cpu.Value = 1.02; // a sample may read a little over all cores
        Assert.Equal(1000, CountCompressed(advisor, 1000));
    }

    private static int CountCompressed(CompressionAdvisor advisor, int n) =>
        Enumerable.Range(0, n).Count(_ => advisor.Decide("t", 10_000, out _) == CompressionDecision.Compress);

    private sealed class FixedCpu : ICpuLoad
    {
        public double Value { get; set; }

        public double Current => Value;
    }

    private sealed class ManualTime : TimeProvider
    {
        private long _now = 1_000_000;

        public override long TimestampFrequency => TimeSpan.TicksPerSecond;

        public override long GetTimestamp() => _now;

        public void Advance(TimeSpan by) => _now += by.Ticks;
    }
}

/// <summary>Compression end to end over real sockets and HTTP.</summary>
public sealed class CompressionTests
{
    [Fact]
    public async Task One_compression_per_publish_shared_by_every_zstd_subscriber_while_others_get_plain()
    {
        await using var broker = await TestBroker.StartAsync();
        var capable = new List<ProtocolClient>();
        for (int i = 0; i < 20; i++)
        {
            ProtocolClient c = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Zstd);
            await c.SubscribeAsync(1, "feed");
            await c.PingPongAsync();
            capable.Add(c);
        }

        await using var plain = await ProtocolClient.OpenAsync(broker.Port);
        await plain.SubscribeAsync(1, "feed");
        await plain.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        CompressionMetrics metrics = broker.Services.GetRequiredService<CompressionMetrics>();
        long before = metrics.Compressions;
        byte[] payload = Payloads.Simple(150_000);

        for (int i = 0; i < 3; i++)
        {
            await publisher.PublishAsync("feed", payload);
        }

        await publisher.PingPongAsync();
        Assert.Equal(3, metrics.Compressions - before);
        foreach (ProtocolClient c in capable)
        {
            for (int i = 0; i < 3; i++)
            {
                Frame f = await c.ReadMessageAsync();
                Assert.Equal(PayloadFlags.Zstd, f.Flags);
                Assert.True(f.Payload!.Length < payload.Length / 5);
                Assert.Equal(payload, new Decompressor().Unwrap(f.Payload).ToArray());
            }

            await c.DisposeAsync();
        }

        for (int i = 0; i < 3; i++)
        {
            Frame f = await plain.ReadMessageAsync();
            Assert.Equal(PayloadFlags.None, f.Flags);
            Assert.Equal(payload, f.Payload);
        }
    }

    [Fact]
    public async Task Welcome_offers_zstd_only_to_clients_that_ask_and_only_when_enabled()
    {
        await using var on = await TestBroker.StartAsync();
        await using var off = await TestBroker.StartAsync(o => o.Compression.Enabled = false);
        await using var asks = await ProtocolClient.ConnectAsync(on.Port);
        await using var silent = await ProtocolClient.ConnectAsync(on.Port);
        await using var asksOff = await ProtocolClient.ConnectAsync(off.Port);

        Assert.Equal(Capabilities.Zstd, (await asks.HelloAsync(capabilities: Capabilities.Zstd)).Capabilities);
        Assert.Equal(Capabilities.None, (await silent.HelloAsync()).Capabilities);
        Assert.Equal(Capabilities.None, (await asksOff.HelloAsync(capabilities: Capabilities.Zstd)).Capabilities);
    }

    [Fact]
    public async Task Small_and_incompressible_payloads_go_out_plain_even_to_zstd_subscribers()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var sub = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Zstd);
        await sub.SubscribeAsync(1, "t.*");
        await sub.PingPongAsync();
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        byte[] small = Payloads.Simple(600);
        byte[] noise = Payloads.Complex(150_000);

        await publisher.PublishAsync("t.small", small);
        for (int i = 0; i < 6; i++)
        {
            await publisher.PublishAsync("t.noise", noise);
        }

        Frame f = await sub.ReadMessageAsync();
        Assert.Equal(PayloadFlags.None, f.Flags);
            Assert.Equal(small, f.Payload);
        for (int i = 0; i < 6; i++)
        {
            f = await sub.ReadMessageAsync();
            Assert.Equal(PayloadFlags.None, f.Flags);
            Assert.Equal(noise, f.Payload);
        }

        var advisor = broker.Services.GetRequiredService<CompressionAdvisor>();
        Assert.True(advisor.Ratio("t.noise", 150_000) > 0.95);
        Assert.Equal(CompressionDecision.Incompressible, advisor.Decide("t.noise", 150_000, out _)); // switched off after warm-up
    }

    [Fact]
    public async Task A_compressed_publish_reaches_plain_subscribers_decompressed_and_zstd_ones_as_sent()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var plain = await ProtocolClient.OpenAsync(broker.Port);
        await using var zstd = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Zstd);
        await plain.SubscribeAsync(1, "in");
        await zstd.SubscribeAsync(1, "in");
        await plain.PingPongAsync();
        await zstd.PingPongAsync();
        LongPollClient http = await LongPollClient.CreateAsync(broker.Http);
        await http.SubscribeAsync(1, "in");
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Zstd);
        byte[] payload = Payloads.Medium(20_000);
        byte[] compressed = new Compressor(3).Wrap(payload).ToArray();

        await publisher.SendAsync(w => FrameWriter.WritePublish(w, "in"u8, default, PayloadFlags.Zstd, compressed));

        Frame atPlain = await plain.ReadMessageAsync();
        Frame atZstd = await zstd.ReadMessageAsync();
        Assert.Equal(PayloadFlags.None, atPlain.Flags);
            Assert.Equal(payload, atPlain.Payload);
        Assert.Equal(PayloadFlags.Zstd, atZstd.Flags);
            Assert.Equal(compressed, atZstd.Payload);
        PollResult json = await http.PollAsync(0, json: true);
        Assert.Equal(payload, Assert.Single(json.Messages).Payload);
    }

    [Fact]
    public async Task Zstd_long_poll_sessions_get_the_compressed_frame()
    {
        await using var broker = await TestBroker.StartAsync();
        using HttpResponseMessage created = await broker.Http.PostAsJsonAsync("/poll/sessions", new { zstd = true });
        var body = await created.Content.ReadFromJsonAsync<System.Text.Json.JsonElement>();
        Assert.True(body.GetProperty("zstd").GetBoolean());
        string session = body.GetProperty("session").GetString()!;
        using (await broker.Http.PostAsJsonAsync($"/poll/sessions/{session}/subscriptions", new { sid = 1, pattern = "lp" }))
        {
        }

        byte[] payload = Payloads.Simple(50_000);
        using (await broker.Http.PostAsync("/poll/publish?topic=lp", new ByteArrayContent(payload)))
        {
        }

        using HttpResponseMessage poll = await broker.Http.GetAsync($"/poll/sessions/{session}/messages?ack=0");
        Frame f = Assert.Single((await LongPollClient.ReadAsync(poll)).Messages);
        Assert.True(f.Payload!.Length < payload.Length / 5);
        Assert.Equal(payload, new Decompressor().Unwrap(f.Payload).ToArray());
    }

    [Theory]
    [InlineData("corrupt", ErrorCode.DecompressionFailed)]
    [InlineData("bomb", ErrorCode.DecompressionFailed)]
    [InlineData("not-negotiated", ErrorCode.MalformedFrame)]
    public async Task Bad_compressed_input_is_refused_and_nobody_else_is_harmed(string kind, ErrorCode expected)
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Limits.MaxFrameBytes = 64 * 1024;
            o.Limits.MaxPendingBytes = 1024 * 1024;
        });
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port);
        await bystander.SubscribeAsync(1, "z");
        await bystander.PingPongAsync();
        await using var offender = await ProtocolClient.OpenAsync(broker.Port, capabilities: kind == "not-negotiated" ? Capabilities.None : Capabilities.Zstd);
        byte[] bad = kind switch
        {
            "corrupt" => [.. new Compressor(3).Wrap(Payloads.Simple(5000)).ToArray().Take(40), .. new byte[20]],
            "bomb" => new Compressor(19).Wrap(new byte[10 * 1024 * 1024]).ToArray(), // ~1 KB that would become 10 MiB
            _ => new Compressor(3).Wrap(Payloads.Simple(5000)).ToArray(),
        };

        await offender.SendAsync(w => FrameWriter.WritePublish(w, "z"u8, default, PayloadFlags.Zstd, bad));

        await offender.ExpectClosedWithAsync(expected);
        await bystander.PublishAsync("z", "fine");
        Assert.Equal("fine", (await bystander.ReadMessageAsync()).Text); // and nothing from the offender before it
    }
}
