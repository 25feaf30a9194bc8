using System.Buffers;
using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Net.Sockets;
using System.Text.Json;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary><c>/varz</c>, <c>/connz</c> and <c>/subsz</c> against real connections and sessions.</summary>
public sealed class MonitoringEndpointsTests
{
    [Fact]
    public async Task Connz_lists_each_real_tcp_connection_with_its_address_and_each_long_poll_session()
    {
        await using var broker = await TestBroker.StartAsync();
        using Socket raw = await ConnectAndHelloAsync(broker.Port, "raw-client");
        await using var a = await ProtocolClient.OpenAsync(broker.Port, "a");
        await using var b = await ProtocolClient.OpenAsync(broker.Port, "b");
        await a.PingPongAsync();
        await b.PingPongAsync();
        LongPollClient first = await LongPollClient.CreateAsync(broker.Http);
        LongPollClient second = await LongPollClient.CreateAsync(broker.Http);
        await first.SubscribeAsync(1, "x");

        JsonElement connz = await GetJsonAsync(broker, "/connz");

        Assert.Equal(5, connz.GetProperty("total").GetInt32());
        List<JsonElement> connections = connz.GetProperty("connections").EnumerateArray().ToList();
        Assert.Equal(["tcp", "tcp", "tcp", "longpoll", "longpoll"], connections.Select(c => c.GetProperty("transport").GetString()));
        List<JsonElement> tcp = connections.Take(3).ToList();
        Assert.Equal(tcp.Select(c => c.GetProperty("cid").GetInt64()).Order(), tcp.Select(c => c.GetProperty("cid").GetInt64())); // by id
        Assert.All(tcp, c => Assert.Equal("127.0.0.1", c.GetProperty("ip").GetString()));
        int rawPort = ((IPEndPoint)raw.LocalEndPoint!).Port;
        Assert.Contains(tcp, c => c.GetProperty("port").GetInt32() == rawPort); // the very socket, by its address
        Assert.All(tcp, c => Assert.True(c.GetProperty("uptime_seconds").GetDouble() >= 0));
        Assert.All(connections.Skip(3), c => Assert.True(c.TryGetProperty("polling", out _)));
        Assert.All(connections.Skip(3), c => Assert.False(c.TryGetProperty("ip", out _))); // a session has no one address

        // Paging and filtering, as NATS's /connz.
        JsonElement page = await GetJsonAsync(broker, "/connz?offset=2&limit=2");
        Assert.Equal((5, 2, 2), (page.GetProperty("total").GetInt32(), page.GetProperty("num_connections").GetInt32(), page.GetProperty("offset").GetInt32()));
        Assert.Equal(["tcp", "longpoll"], page.GetProperty("connections").EnumerateArray().Select(c => c.GetProperty("transport").GetString()));
        JsonElement sessions = await GetJsonAsync(broker, "/connz?transport=longpoll");
        Assert.Equal(2, sessions.GetProperty("total").GetInt32());
        using (HttpResponseMessage bad = await broker.Monitoring.GetAsync("/connz?limit=0"))
        {
            Assert.Equal(HttpStatusCode.BadRequest, bad.StatusCode);
        }

        // A connection that leaves is no longer listed.
        raw.Shutdown(SocketShutdown.Both);
        raw.Close();
        JsonElement after = await EventuallyAsync(broker, "/connz?transport=tcp", j => j.GetProperty("total").GetInt32() == 2);
        Assert.DoesNotContain(after.GetProperty("connections").EnumerateArray(), c => c.GetProperty("port").GetInt32() == rawPort);
    }

    [Fact]
    public async Task Varz_reports_server_info_configured_limits_and_totals()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.ServerName = "varz-test";
            o.Limits.MaxFrameBytes = 65536;
        });
        await using var subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await using var publisher = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, "v.*");
        await subscriber.PingPongAsync();
        for (int i = 0; i < 3; i++)
        {
            await publisher.PublishAsync("v.1", "m");
        }

        await publisher.PingPongAsync();
        await subscriber.PingPongAsync();

        JsonElement varz = await GetJsonAsync(broker, "/varz");

        Assert.Equal("varz-test", varz.GetProperty("server_name").GetString());
        Assert.False(string.IsNullOrEmpty(varz.GetProperty("version").GetString()));
        Assert.StartsWith(".NET", varz.GetProperty("runtime").GetString(), StringComparison.Ordinal);
        Assert.Equal("ready", varz.GetProperty("status").GetString());
        Assert.Equal(Environment.ProcessId, varz.GetProperty("pid").GetInt32());
        Assert.Equal(broker.Port, varz.GetProperty("ports").GetProperty("tcp_first").GetInt32());
        Assert.Equal(broker.HttpPort, varz.GetProperty("ports").GetProperty("http").GetInt32());
        Assert.Equal(2, varz.GetProperty("connections").GetInt32());
        Assert.Equal(2, varz.GetProperty("total_connections").GetInt64());
        Assert.Equal(1, varz.GetProperty("subscriptions").GetInt32());
        Assert.Equal(1, varz.GetProperty("topics").GetInt32());
        Assert.Equal(3, varz.GetProperty("messages").GetProperty("published").GetInt64());
        Assert.Equal(3, varz.GetProperty("messages").GetProperty("delivered").GetInt64());
        Assert.Equal(65536, varz.GetProperty("limits").GetProperty("max_frame_bytes").GetInt32());
        Assert.Equal("Disconnect", varz.GetProperty("limits").GetProperty("slow_consumer_policy").GetString());
        Assert.Equal("00:00:15", varz.GetProperty("long_poll").GetProperty("poll_timeout").GetString());
        JsonElement process = varz.GetProperty("process");
        Assert.True(process.GetProperty("working_set_bytes").GetInt64() > 0);
        Assert.True(process.GetProperty("cpu_seconds").GetDouble() > 0);
        Assert.Equal(Environment.ProcessorCount, process.GetProperty("cores").GetInt32());
    }

    [Fact]
    public async Task Subsz_lists_patterns_with_their_subscription_counts_most_first()
    {
        await using var broker = await TestBroker.StartAsync();
        await using var a = await ProtocolClient.OpenAsync(broker.Port);
        await using var b = await ProtocolClient.OpenAsync(broker.Port);
        await a.SubscribeAsync(1, "prices.eu");
        await b.SubscribeAsync(1, "prices.eu");
        await a.SubscribeAsync(2, "prices.*");
        await b.SubscribeAsync(2, "news.>");
        LongPollClient poller = await LongPollClient.CreateAsync(broker.Http);
        await poller.SubscribeAsync(1, "prices.eu");
        await a.PingPongAsync();
        await b.PingPongAsync();

        JsonElement subsz = await GetJsonAsync(broker, "/subsz");

        Assert.Equal(5, subsz.GetProperty("num_subscriptions").GetInt32());
        Assert.Equal(3, subsz.GetProperty("num_patterns").GetInt32());
        Assert.False(subsz.GetProperty("truncated").GetBoolean());
        var patterns = subsz.GetProperty("patterns").EnumerateArray().Select(p => (p.GetProperty("pattern").GetString(), p.GetProperty("subscribers").GetInt32())).ToList();
        Assert.Equal([("prices.eu", 3), ("news.>", 1), ("prices.*", 1)], patterns);

        JsonElement matching = await GetJsonAsync(broker, "/subsz?topic=prices.eu");
        Assert.Equal(["prices.eu", "prices.*"], matching.GetProperty("patterns").EnumerateArray().Select(p => p.GetProperty("pattern").GetString()));
        JsonElement paged = await GetJsonAsync(broker, "/subsz?offset=1&limit=1");
        Assert.Equal("news.>", Assert.Single(paged.GetProperty("patterns").EnumerateArray()).GetProperty("pattern").GetString());
    }

    private static async Task<JsonElement> GetJsonAsync(TestBroker broker, string path)
    {
        using HttpResponseMessage response = await broker.Monitoring.GetAsync(path);
        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal("application/json", response.Content.Headers.ContentType?.MediaType);
        return await response.Content.ReadFromJsonAsync<JsonElement>();
    }

    private static Task<JsonElement> EventuallyAsync(TestBroker broker, string path, Func<JsonElement, bool> condition) =>
        Until.Value(() => GetJsonAsync(broker, path), condition, $"{path} meets the condition");

    /// <summary>A plain socket that says HELLO and waits for WELCOME, so the test knows its local address.</summary>
    private static async Task<Socket> ConnectAndHelloAsync(int port, string name)
    {
        var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await socket.ConnectAsync(new IPEndPoint(IPAddress.Loopback, port));
        var hello = new ArrayBufferWriter<byte>();
        FrameWriter.WriteHello(hello, name, Capabilities.None);
        await socket.SendAsync(hello.WrittenMemory);
        byte[] welcome = new byte[4096];
        int read = await socket.ReceiveAsync(welcome); // WELCOME: the broker has registered the connection
        Assert.True(read > 0, string.Create(CultureInfo.InvariantCulture, $"no WELCOME ({read} bytes)"));
        return socket;
    }
}
