using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Xml.Linq;
using Herald.Broker.Tests.Infrastructure;

namespace Herald.Broker.Tests;

/// <summary>The socket-policy responder (protocol-spec/longpoll.md §4) over raw sockets, and the HTTP policy files.</summary>
public sealed class PolicyTests
{
    private static readonly byte[] Request = Encoding.ASCII.GetBytes("<policy-file-request/>");

    /// <summary>A hang guard, not a timing assertion: far above any policy timeout the tests configure.</summary>
    private static readonly TimeSpan HangLimit = TimeSpan.FromSeconds(20);

    [Fact]
    public async Task Silverlight_request_gets_the_client_access_policy_for_the_configured_ports_and_domains()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Policy.AllowedDomains = ["http://app.example", "https://x.example"]);

        (byte[] answer, bool closed) = await ExchangeAsync(broker.PolicyPort, Request);

        Assert.True(closed);
        XDocument policy = XDocument.Parse(Encoding.UTF8.GetString(answer));
        XElement socket = policy.Descendants("socket-resource").Single();
        Assert.Equal($"{broker.Port}-{broker.Port}", socket.Attribute("port")!.Value);
        Assert.Equal("tcp", socket.Attribute("protocol")!.Value);
        Assert.Equal(["http://app.example", "https://x.example"], policy.Descendants("domain").Select(d => d.Attribute("uri")!.Value));
    }

    [Fact]
    public async Task Flash_request_gets_a_nul_terminated_cross_domain_policy()
    {
        await using var broker = await TestBroker.StartAsync();

        (byte[] answer, bool closed) = await ExchangeAsync(broker.PolicyPort, [.. Request, 0]);

        Assert.True(closed);
        Assert.Equal(0, answer[^1]);
        XDocument policy = XDocument.Parse(Encoding.UTF8.GetString(answer, 0, answer.Length - 1));
        XElement allow = policy.Descendants("allow-access-from").Single();
        Assert.Equal(("*", $"{broker.Port}-{broker.Port}"), (allow.Attribute("domain")!.Value, allow.Attribute("to-ports")!.Value));
    }

    [Theory]
    [InlineData("garbage")]
    [InlineData("oversized")]
    [InlineData("wrong-terminator")]
    [InlineData("http")]
    public async Task Anything_else_is_closed_without_an_answer(string kind)
    {
        await using var broker = await TestBroker.StartAsync();
        using MetricsProbe metrics = broker.Metrics();
        byte[] bytes = kind switch
        {
            "garbage" => Encoding.ASCII.GetBytes("<hello/>"),
            "oversized" => [.. Request, .. Request],
            "wrong-terminator" => [.. Request, (byte)'\n'],
            _ => Encoding.ASCII.GetBytes("GET /clientaccesspolicy.xml HTTP/1.1\r\n\r\n"),
        };

        (byte[] answer, bool closed) = await ExchangeAsync(broker.PolicyPort, bytes);

        Assert.True(closed);
        Assert.Empty(answer);
        Assert.Equal(1, metrics["herald.policy.requests", "herald.policy.outcome", "refused"]);
        Assert.Equal(1, metrics["herald.policy.requests"]);
    }

    [Fact]
    public async Task A_client_too_slow_to_ask_is_closed_without_an_answer()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Policy.Timeout = TimeSpan.FromMilliseconds(200));
        using MetricsProbe metrics = broker.Metrics();

        (byte[] answer, bool closed) = await ExchangeAsync(broker.PolicyPort, Request[..10]); // never finishes

        Assert.True(closed);
        Assert.Empty(answer);
        Assert.Equal(1, metrics["herald.policy.requests", "herald.policy.outcome", "timeout"]);
    }

    [Fact]
    public async Task Many_concurrent_requests_are_all_answered()
    {
        // 200 at once from one address (loopback): under its cap, so none is shed however the accepts interleave.
        await using var broker = await TestBroker.StartAsync(o => o.Policy.MaxConnectionsPerAddress = 200);

        var answers = await Task.WhenAll(Enumerable.Range(0, 200).Select(_ => ExchangeAsync(broker.PolicyPort, Request)));

        Assert.All(answers, a => Assert.Contains("socket-resource", Encoding.UTF8.GetString(a.Answer), StringComparison.Ordinal));
    }

    [Fact]
    public async Task At_the_concurrency_limit_idle_sockets_are_shed_oldest_first_and_a_real_request_is_answered()
    {
        const int Limit = 20;
        const int Idle = 60;
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Policy.MaxConcurrentRequests = Limit;
            o.Policy.MaxConnectionsPerAddress = 1_000; // this test is about the overall limit
            o.Policy.Timeout = TimeSpan.FromMinutes(1);  // the idle sockets would outlive the test
        });
        using MetricsProbe metrics = broker.Metrics();

        // An attacker's idle sockets, one after another: they never send a byte. Every one past the limit
        // takes the place of the oldest.
        var idle = new List<TcpClient>();
        try
        {
            for (int i = 0; i < Idle; i++)
            {
                var socket = new TcpClient();
                await socket.ConnectAsync(IPAddress.Loopback, broker.PolicyPort);
                idle.Add(socket);
            }

            await Until.True(() => metrics["herald.policy.requests", "herald.policy.outcome", "shed"] == Idle - Limit, "the idle connections over the limit are shed", HangLimit);
            Assert.True(await ClosedAsync(idle[0])); // the oldest went first

            // A real client, from the same address even, is answered.
            (byte[] answer, bool closed) = await ExchangeAsync(broker.PolicyPort, Request);
            Assert.True(closed);
            Assert.Contains("socket-resource", Encoding.UTF8.GetString(answer), StringComparison.Ordinal);
            Assert.Equal(0, metrics["herald.policy.requests", "herald.policy.outcome", "busy"]);
            Assert.Equal(1, metrics["herald.policy.requests", "herald.policy.outcome", "silverlight"]);
        }
        finally
        {
            idle.ForEach(s => s.Dispose());
        }
    }

    [Fact]
    public async Task One_address_holds_at_most_its_cap_of_idle_sockets_and_a_bystander_from_another_is_answered()
    {
        const int Cap = 4;
        await using var broker = await TestBroker.StartAsync(o =>
        {
            o.Policy.MaxConnectionsPerAddress = Cap;
            o.Policy.Timeout = TimeSpan.FromMinutes(1);
        });
        using MetricsProbe metrics = broker.Metrics();

        var idle = new List<TcpClient>();
        try
        {
            for (int i = 0; i < 50; i++)
            {
                var socket = new TcpClient(new IPEndPoint(IPAddress.Loopback, 0));
                await socket.ConnectAsync(IPAddress.Loopback, broker.PolicyPort);
                idle.Add(socket);
            }

            await Until.True(() => metrics["herald.policy.requests", "herald.policy.outcome", "shed"] == 50 - Cap, "the connections over the cap are shed", HangLimit);

            // A bystander on another address (127.0.0.2 is loopback too) is answered.
            using var bystander = new TcpClient(new IPEndPoint(IPAddress.Parse("127.0.0.2"), 0));
            await bystander.ConnectAsync(IPAddress.Loopback, broker.PolicyPort);
            (byte[] answer, bool closed) = await ExchangeAsync(bystander, Request);
            Assert.True(closed);
            Assert.Contains("socket-resource", Encoding.UTF8.GetString(answer), StringComparison.Ordinal);

            // The attacker's address still holds only its cap: the oldest were closed, the newest are open.
            Assert.True(await ClosedAsync(idle[0]));
            Assert.Equal(50 - Cap, metrics["herald.policy.requests", "herald.policy.outcome", "shed"]);
        }
        finally
        {
            idle.ForEach(s => s.Dispose());
        }
    }

    [Fact]
    public async Task Http_policy_files_are_served_with_the_same_domains()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Policy.AllowedDomains = ["a.example", "b.example\"<x>"]);

        XDocument silverlight = XDocument.Parse(await broker.Http.GetStringAsync("/clientaccesspolicy.xml"));
        XDocument flash = XDocument.Parse(await broker.Http.GetStringAsync("/crossdomain.xml"));

        Assert.Equal(["a.example", "b.example\"<x>"], silverlight.Descendants("domain").Select(d => d.Attribute("uri")!.Value)); // escaped, not spliced
        Assert.Equal("/", silverlight.Descendants("resource").Single().Attribute("path")!.Value);
        Assert.Equal(["a.example", "b.example\"<x>"], flash.Descendants("allow-access-from").Select(d => d.Attribute("domain")!.Value));
    }

    /// <summary>
    /// Sends bytes, then reads until the broker closes the connection. <c>Closed</c> is false when the
    /// connection was still open after <see cref="HangLimit"/>: what it had sent by then is the answer.
    /// </summary>
    private static async Task<(byte[] Answer, bool Closed)> ExchangeAsync(int port, byte[] request)
    {
        using var client = new TcpClient();
        await client.ConnectAsync(IPAddress.Loopback, port);
        return await ExchangeAsync(client, request);
    }

    private static async Task<(byte[] Answer, bool Closed)> ExchangeAsync(TcpClient client, byte[] request)
    {
        NetworkStream stream = client.GetStream();
        await stream.WriteAsync(request);
        var answer = new MemoryStream();
        using var hang = new CancellationTokenSource(HangLimit);
        try
        {
            await stream.CopyToAsync(answer, hang.Token);
        }
        catch (IOException)
        {
            // reset instead of a clean close: still closed
        }
        catch (OperationCanceledException)
        {
            return (answer.ToArray(), false);
        }

        return (answer.ToArray(), true);
    }

    /// <summary>Whether the broker closed <paramref name="client"/> (its read ends) within the hang limit.</summary>
    private static async Task<bool> ClosedAsync(TcpClient client)
    {
        using var hang = new CancellationTokenSource(HangLimit);
        try
        {
            return await client.GetStream().ReadAsync(new byte[1], hang.Token) == 0;
        }
        catch (IOException)
        {
            return true; // reset
        }
        catch (OperationCanceledException)
        {
            return false;
        }
    }
}
