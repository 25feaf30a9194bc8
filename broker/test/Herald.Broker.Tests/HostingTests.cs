using Herald.Broker.Hosting;
using Herald.Broker.Tests.Infrastructure;
using Microsoft.Extensions.Options;

namespace Herald.Broker.Tests;

public sealed class HostingTests
{
    [Theory]
    [InlineData("--Herald:Tcp:PortRangeStart=5000", "--Herald:Tcp:PortRangeEnd=4000", "PortRangeEnd (4000) is below")]
    [InlineData("--Herald:Limits:MaxFrameBytes=10", "--Herald:Limits:MaxTopicLength=10", "MaxFrameBytes must be between 64")]
    [InlineData("--Herald:Limits:PingInterval=00:00:00", "--Herald:Limits:MaxTopicLength=10", "PingInterval (00:00:00) must be between")]
    [InlineData("--Herald:Tcp:Host=not-an-ip", "--Herald:Limits:MaxTopicLength=10", "'not-an-ip' is not an IP address")]
    [InlineData("--Herald:Limits:MaxPendingBytes=2000", "--Herald:Limits:MaxFrameBytes=4096", "must hold at least one frame")]
    [InlineData("--Herald:Http:Port=9100", "--Herald:Monitoring:Port=9100", "the monitoring listener needs its own")]
    [InlineData("--Herald:Monitoring:Token=too-short", "--Herald:Monitoring:Host=0.0.0.0", "Token")]
    [InlineData("--Herald:Limits:SocketBlockBytes=1000", "--Herald:Limits:MaxTopicLength=10", "SocketBlockBytes must be between 4096")]
    [InlineData("--Herald:Monitoring:Host=monitor.example", "--Herald:Limits:MaxTopicLength=10", "Herald:Monitoring:Host 'monitor.example' is not an IP address")]
    [InlineData("--Herald:Cluster:Redis=127.0.0.1:1", "--Herald:Cluster:ControlReplyTimeout=00:00:00", "Herald:Cluster:ControlReplyTimeout (00:00:00) must be between")]
    public void Invalid_configuration_fails_at_start_with_a_clear_message(string arg1, string arg2, string expected)
    {
        var e = Assert.Throws<OptionsValidationException>(() => HeraldHost.Build([arg1, arg2]));

        Assert.Contains(e.Failures, f => f.Contains(expected, StringComparison.Ordinal));
    }

    [Fact]
    public async Task Options_come_from_the_command_line()
    {
        await using var broker = await TestBrokerWithArgs("--Herald:ServerName=from-args", "--Herald:Limits:MaxTopicLength=77");
        await using var client = await ProtocolClient.ConnectAsync(broker.Port);

        var welcome = await client.HelloAsync();

        Assert.Equal("from-args", welcome.ServerName);
        Assert.Equal(77ul, welcome.Limits["max_topic"]);
    }

    private static Task<TestBroker> TestBrokerWithArgs(params string[] args) => TestBroker.StartAsync(args: args);
}

/// <summary>The default port range, 4502-4534, on loopback. Alone, since it binds fixed ports.</summary>
[Collection(nameof(Isolated))]
public sealed class DefaultPortTests
{
    [Fact]
    public async Task Clients_on_the_first_and_last_port_of_the_range_see_each_other()
    {
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Tcp.PortRangeStart = 4502;
            o.Tcp.PortRangeEnd = 4534;
        });
        Assert.Equal(Enumerable.Range(4502, 33), broker.Ports);
        await using var low = await ProtocolClient.OpenAsync(4502);
        await using var high = await ProtocolClient.OpenAsync(4534);
        await low.SubscribeAsync(1, "ports");
        await high.SubscribeAsync(1, "ports");
        await low.PingPongAsync();
        await high.PingPongAsync();

        await low.PublishAsync("ports", "from 4502");
        await high.PublishAsync("ports", "from 4534");

        Assert.Equal(["from 4502", "from 4534"], new[] { (await high.ReadMessageAsync()).Text, (await high.ReadMessageAsync()).Text }.Order());
        Assert.Equal(["from 4502", "from 4534"], new[] { (await low.ReadMessageAsync()).Text, (await low.ReadMessageAsync()).Text }.Order());
    }
}
