using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// <c>Herald:Tcp:InlineFanout</c>: a read batch that reached a few receivers writes them on the reading thread, one
/// after the other, instead of spreading them over the pool. A receiver that stops reading must still cost only its
/// own queue: its write goes pending and the others, and the publisher's own read loop, carry on.
/// </summary>
public sealed class InlineFanoutTests
{
    private const int Messages = 48;
    private const int PayloadSize = 32 * 1024; // 1.5 MiB in all: far past the stalled member's socket buffers

    [Fact]
    public async Task A_room_written_inline_delivers_everything_in_order_beside_a_member_that_stopped_reading()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Tcp.InlineFanout = 8;
            o.Tcp.SendBufferBytes = 32 * 1024;
        });
        await using var stalled = await ProtocolClient.OpenAsync(broker.Port, "stalled", receiveBufferSize: 4096);
        await stalled.SubscribeAsync(1, "room.inline");
        await stalled.PingPongAsync();
        var readers = new List<ProtocolClient>();
        try
        {
            for (int i = 0; i < 3; i++)
            {
                ProtocolClient reader = await ProtocolClient.OpenAsync(broker.Port, $"reader{i}");
                await reader.SubscribeAsync((uint)(i + 10), "room.inline");
                await reader.PingPongAsync();
                readers.Add(reader);
            }

            await using var publisher = await ProtocolClient.OpenAsync(broker.Port, "publisher");
            var payload = new byte[PayloadSize];
            await publisher.SendAsync(w =>
            {
                for (int m = 0; m < Messages; m++)
                {
                    BitConverter.TryWriteBytes(payload, m);
                    FrameWriter.WritePublish(w, "room.inline"u8, default, PayloadFlags.None, payload);
                }
            });
            await publisher.PingPongAsync(); // the publisher's read loop was not held by the member that stopped reading

            await Task.WhenAll(readers.Select(async (reader, index) =>
            {
                for (int m = 0; m < Messages; m++)
                {
                    Frame f = await reader.ReadMessageAsync();
                    Assert.Equal((uint)(index + 10), f.Sid);
                    Assert.Equal(m, BitConverter.ToInt32(f.Payload));
                }
            }));
        }
        finally
        {
            foreach (ProtocolClient reader in readers)
            {
                await reader.DisposeAsync();
            }
        }
    }
}
