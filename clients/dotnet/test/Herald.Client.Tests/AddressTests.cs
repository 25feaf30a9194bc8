using Herald.Client;

namespace Herald.Client.Tests;

/// <summary>Addresses (one API, the transport chosen by the scheme) and the reconnect backoff.</summary>
public class AddressTests
{
    [Theory]
    [InlineData("tcp://broker.example:4502", "broker.example", 4502, 4502)]
    [InlineData("tcp://broker.example:4502-4534", "broker.example", 4502, 4534)]
    [InlineData("TCP://10.0.0.7", "10.0.0.7", 4502, 4502)]
    [InlineData("tcp://[::1]:4510/", "::1", 4510, 4510)]
    [InlineData("tcp://[::1]", "::1", 4502, 4502)]
    [InlineData("tls://broker.example:4502-4517", "broker.example", 4502, 4517)]
    public void A_tcp_address_is_a_host_and_a_port_or_range(string url, string host, int first, int last)
    {
        var address = BrokerAddress.Parse(url);

        Assert.Equal(HeraldTransport.Tcp, address.Transport);
        Assert.Equal(url.StartsWith("tls", StringComparison.Ordinal), address.Tls);
        Assert.Equal(host, address.Host);
        Assert.Equal(first, address.FirstPort);
        Assert.Equal(last, address.LastPort);
        for (int i = 0; i < 100; i++)
        {
            Assert.InRange(address.PickPort(), first, last);
        }
    }

    [Fact]
    public void A_port_range_spreads_connections_over_its_ports()
    {
        var address = BrokerAddress.Parse("tcp://localhost:4502-4534");

        int[] picked = [.. Enumerable.Range(0, 2000).Select(_ => address.PickPort()).Distinct()];

        Assert.True(picked.Length > 20, $"Only {picked.Length} of 33 ports were picked in 2000 connections.");
    }

    [Theory]
    [InlineData("http://localhost:8080", "http://localhost:8080/")]
    [InlineData("https://herald.example/", "https://herald.example/")]
    [InlineData("http://proxy.example/herald", "http://proxy.example/herald/")]
    public void An_http_address_is_the_long_poll_base(string url, string expected)
    {
        var address = BrokerAddress.Parse(url);

        Assert.Equal(HeraldTransport.LongPoll, address.Transport);
        Assert.Equal(expected, address.HttpBase!.ToString());
    }

    [Theory]
    [InlineData("ws://localhost:8080", "ws://localhost:8080/ws", false, 8080)]
    [InlineData("ws://localhost:8080/", "ws://localhost:8080/ws", false, 8080)]
    [InlineData("WS://127.0.0.1:8080/ws", "ws://127.0.0.1:8080/ws", false, 8080)]
    [InlineData("wss://herald.example", "wss://herald.example/ws", true, 443)]
    [InlineData("wss://proxy.example:8443/herald/ws", "wss://proxy.example:8443/herald/ws", true, 8443)]
    public void A_ws_address_is_the_WebSocket_endpoint_at_ws_unless_it_names_a_path(string url, string expected, bool tls, int port)
    {
        var address = BrokerAddress.Parse(url);

        Assert.Equal(HeraldTransport.WebSocket, address.Transport);
        Assert.Equal(expected, address.WebSocket!.ToString());
        Assert.Equal(expected, address.ToString());
        Assert.Equal((tls, port, port), (address.Tls, address.FirstPort, address.PickPort()));
    }

    [Theory]
    [InlineData("localhost:4502")]
    [InlineData("nats://localhost:4222")]
    [InlineData("ws://localhost:8080/ws?token=x")]
    [InlineData("wss://localhost/ws#top")]
    [InlineData("tcp://")]
    [InlineData("tcp://:4502")]
    [InlineData("tcp://host:0")]
    [InlineData("tcp://host:65536")]
    [InlineData("tcp://host:4534-4502")]
    [InlineData("tcp://host:45x")]
    [InlineData("tcp://::1:4502")]
    [InlineData("tcp://host:4502/path")]
    [InlineData("http://host:8080/?q=1")]
    public void Anything_else_is_an_ArgumentException_that_shows_the_address(string url)
    {
        var e = Assert.Throws<ArgumentException>(() => BrokerAddress.Parse(url));

        Assert.Contains(url, e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void Backoff_doubles_up_to_the_maximum_with_jitter_between_half_and_all()
    {
        TimeSpan initial = TimeSpan.FromMilliseconds(100), max = TimeSpan.FromSeconds(5);

        for (int attempt = 0; attempt < 40; attempt++)
        {
            double ceiling = Math.Min(max.TotalMilliseconds, 100 * Math.Pow(2, attempt));
            TimeSpan[] delays = [.. Enumerable.Range(0, 50).Select(_ => HeraldClient.Backoff(attempt, initial, max))];
            Assert.All(delays, d => Assert.InRange(d.TotalMilliseconds, ceiling / 2, ceiling));
            Assert.True(delays.Distinct().Count() > 1, "No jitter.");
        }
    }
}
