using System.Text;
using System.Text.Json;
using Herald.Broker.Compression;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Microsoft.Extensions.DependencyInjection;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// What deltas (spec §11.2) cost the broker, bounded against a client that tries to make it cost more: the bases kept
/// for many topics stay within <c>Herald:Compression:Deltas:MaxKeptBytes</c> (topics past it get full messages, every
/// payload still right), and a topic whose deltas do not pay (random bytes) stops computing them but for probes. Each
/// bound is asserted on what the broker counts (<c>/varz</c> <c>deltas</c>, the engine's decisions).
/// </summary>
public sealed class DeltaBoundsTests(ITestOutputHelper output)
{
    private const Capabilities Deltas = Capabilities.Deltas;

    [Fact]
    public async Task A_client_subscribing_to_many_topics_with_deltas_cannot_make_the_broker_keep_more_than_the_bound()
    {
        const long Bound = 4096;
        await using var broker = await TestBroker.StartAsync(o => o.Compression.Deltas.MaxKeptBytes = Bound);
        await using var hog = await ProtocolClient.OpenAsync(broker.Port, "hog", capabilities: Deltas);
        await using var bystander = await ProtocolClient.OpenAsync(broker.Port, "bystander", capabilities: Deltas);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");
        const int Topics = 100;
        for (uint i = 1; i <= Topics; i++)
        {
            await hog.SubscribeAsync(i, $"hog.{i}", SubscribeOptions.Delta);
        }

        await bystander.SubscribeAsync(1, "quotes", SubscribeOptions.Delta);
        await hog.PingPongAsync();
        await bystander.PingPongAsync();

        var hogs = new DeltaReader(hog);
        var quotes = new DeltaReader(bystander);
        for (int round = 0; round < 3; round++)
        {
            for (int i = 1; i <= Topics; i++)
            {
                byte[] payload = Payload($"hog {i} round {round}", 512);
                await publisher.PublishAsync($"hog.{i}", payload);
                Assert.Equal(payload, await hogs.NextAsync((uint)i)); // every payload right, delta or full
            }

            byte[] quote = Payload($"quote round {round}", 200);
            await publisher.PublishAsync("quotes", quote);
            Assert.Equal(quote, await quotes.NextAsync(1));
        }

        using JsonDocument varz = JsonDocument.Parse(await broker.Monitoring.GetStringAsync("/varz"));
        JsonElement deltas = varz.RootElement.GetProperty("deltas");
        long kept = deltas.GetProperty("kept_bytes").GetInt64();
        long overBudget = deltas.GetProperty("over_budget").GetInt64();
        output.WriteLine($"{Topics + 1} delta topics, 512-byte payloads: kept {kept} bytes (bound {Bound}), {overBudget} publications refused a base, {deltas.GetProperty("sent").GetInt64()} deltas sent; the hog read {hogs.Deltas} deltas and {hogs.Full} full messages");
        Assert.Equal(Topics + 1, deltas.GetProperty("topics").GetInt32());
        Assert.True(kept <= Bound, $"kept {kept} > {Bound}");
        Assert.True(overBudget > 0, "the bound was never reached: the test proves nothing");
        Assert.True(hogs.Deltas > 0, "no topic within the bound got a delta");
    }

    [Fact]
    public async Task A_publisher_of_random_bytes_makes_its_topic_stop_computing_deltas()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Compression.Deltas.WarmupSamples = 3;
            o.Compression.Deltas.ProbeEveryMessages = 50;
        });
        DeltaEncoder engine = broker.Services.GetRequiredService<MessageEncoder>().Deltas!;
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port, "subscriber", capabilities: Deltas);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");
        await subscriber.SubscribeAsync(1, "noise", SubscribeOptions.Delta);
        await subscriber.SubscribeAsync(2, "state", SubscribeOptions.Delta);
        await subscriber.PingPongAsync();
        var reader = new DeltaReader(subscriber);

        const int Count = 200;
        var random = new Random(37);
        for (int i = 0; i < Count; i++)
        {
            byte[] noise = new byte[256];
            random.NextBytes(noise);
            await publisher.PublishAsync("noise", noise);
            Assert.Equal(noise, await reader.NextAsync(1));
        }

        long computedForNoise = engine.Count(DeltaDecision.NotSmaller) + engine.Count(DeltaDecision.Delta) + engine.Count(DeltaDecision.Probe);
        long notPaying = engine.Count(DeltaDecision.NotPaying);
        for (int i = 0; i < 20; i++)
        {
            byte[] state = Payload($"state {i}", 200);
            await publisher.PublishAsync("state", state);
            Assert.Equal(state, await reader.NextAsync(2));
        }

        output.WriteLine($"{Count} random payloads: {computedForNoise} deltas computed (none smaller), {notPaying} skipped as not paying; then 20 JSON-like updates on another topic: {engine.Deltas} deltas sent, {reader.Deltas} read");
        Assert.Equal(0, reader.DeltasOf(1)); // none was ever smaller than the payload
        Assert.True(computedForNoise <= 3 + (Count / 50) + 1, $"{computedForNoise} deltas computed for random bytes"); // the warm-up, then one probe per 50
        Assert.True(notPaying >= Count - 10, $"{notPaying} skipped");
        Assert.True(reader.DeltasOf(2) >= 15, $"{reader.DeltasOf(2)} deltas on a topic where they pay"); // the noise did not switch off the others
    }

    /// <summary>A payload of <paramref name="size"/> bytes that begins with <paramref name="head"/> and repeats a fixed text after it: consecutive ones differ only at the start.</summary>
    private static byte[] Payload(string head, int size)
    {
        byte[] payload = new byte[size];
        Encoding.ASCII.GetBytes(head.PadRight(24)).CopyTo(payload, 0);
        for (int i = 24; i < size; i++)
        {
            payload[i] = (byte)('a' + (i % 23));
        }

        return payload;
    }

    /// <summary>Reads MESSAGEs and applies deltas as a client does: per sid, to the last payload it received.</summary>
    private sealed class DeltaReader(ProtocolClient client)
    {
        private readonly Dictionary<uint, byte[]> _last = [];
        private readonly Dictionary<uint, int> _deltas = [];

        public int Deltas => _deltas.Values.Sum();

        public int Full { get; private set; }

        public int DeltasOf(uint sid) => _deltas.GetValueOrDefault(sid);

        public async Task<byte[]> NextAsync(uint sid)
        {
            Frame frame = await client.ReadAsync();
            Assert.Equal((FrameType.Message, sid), (frame.Type, frame.Sid));
            byte[] payload = frame.Payload!;
            if ((frame.Flags & PayloadFlags.Delta) != 0)
            {
                payload = FossilDelta.Apply(_last[sid], payload, 1 << 20);
                _deltas[sid] = DeltasOf(sid) + 1;
            }
            else
            {
                Full++;
            }

            _last[sid] = payload;
            return payload;
        }
    }
}
