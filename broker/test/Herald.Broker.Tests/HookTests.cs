using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using Herald.Broker.Security;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;
using Herald.Testing;
using Xunit;
using Xunit.Abstractions;

namespace Herald.Broker.Tests;

/// <summary>
/// The event hooks (protocol-spec/hooks.md) against a real HTTP backend the test starts (<see cref="HookBackend"/>): it
/// allows, refuses, stalls and answers garbage. Counts are the backend's own and the broker's hook metrics; the one
/// timeout configured small is never measured.
/// </summary>
public sealed class HookTests(ITestOutputHelper output)
{
    private const string Allow = """{"result":"allow"}""";

    /// <summary>The backend of most tests: topics say what it answers (secret: refused; stall: never; junk: garbage; cached: allowed for a minute).</summary>
    private static Task<string?> Decide(string hook, JsonElement question)
    {
        if (hook == "connect")
        {
            return Task.FromResult<string?>(question.GetProperty("credential").GetString() switch
            {
                "alice-token" => """{"result":"allow","identity":"alice","permissions":{"subscribe":["chat.>","rooms.>"],"publish":["chat.>"]},"cacheSeconds":60}""",
                "stall" => null,
                "junk" => "<html>not a decision</html>",
                _ => """{"result":"refuse","reason":"unknown token"}""",
            });
        }

        string topic = question.GetProperty("topic").GetString()!;
        return Task.FromResult<string?>(
            topic.Contains("secret", StringComparison.Ordinal) ? """{"result":"refuse","reason":"members only"}"""
            : topic.Contains("stall", StringComparison.Ordinal) ? null
            : topic.Contains("junk", StringComparison.Ordinal) ? """{"result":"maybe"}"""
            : topic.Contains("cached", StringComparison.Ordinal) ? """{"result":"allow","cacheSeconds":60}"""
            : Allow);
    }

    [Fact]
    public async Task The_connect_hook_names_the_identity_and_its_permissions_hold()
    {
        await using HookBackend backend = await HookBackend.StartAsync(Decide);
        await using TestBroker broker = await TestBroker.StartAsync(o => o.Hooks.Connect.Url = backend.Url("connect"));
        using MetricsProbe metrics = broker.Metrics();

        await using ProtocolClient alice = await ProtocolClient.OpenAsync(broker.Port, "alice-app", auth: "alice-token");
        await alice.SubscribeAsync(1, "chat.lobby");
        await alice.SubscribeAsync(2, "billing.invoices");
        List<Frame> answered = await alice.BarrierAsync();
        Frame refused = Assert.Single(answered);
        Assert.Equal(ErrorCode.PermissionDenied, refused.Error!.Value.Code);
        Assert.Contains("billing.invoices", refused.Error.Value.Message, StringComparison.Ordinal);
        await alice.PublishAsync("chat.lobby", "hello");
        Assert.Equal("hello", (await alice.ReadMessageAsync()).Text);

        await using ProtocolClient mallory = await ProtocolClient.ConnectAsync(broker.Port);
        await mallory.SendAsync(w => FrameWriter.WriteHello(w, "mallory", Capabilities.None, "stolen"));
        ErrorFrame closed = await mallory.ExpectClosedWithAsync(ErrorCode.AuthenticationFailed);
        Assert.DoesNotContain("unknown token", closed.Message, StringComparison.Ordinal); // a refused credential is told nothing more (spec §4.1)

        (string hook, JsonElement question, _) = backend.Questions.First();
        Assert.Equal(("connect", "tcp", "alice-app"), (hook, question.GetProperty("transport").GetString(), question.GetProperty("client").GetString()));
        Assert.StartsWith("127.0.0.1:", question.GetProperty("remoteAddress").GetString(), StringComparison.Ordinal);
        Assert.Equal(2, backend.Calls("connect"));
        Assert.Equal((2L, 1L), (metrics["herald.hook.calls", "herald.hook", "connect"], metrics["herald.hook.refusals", "herald.hook", "connect"]));

        // Long-poll's bearer credential goes through the same hook (and its cached answer).
        using var http = new HttpClient { BaseAddress = broker.Http.BaseAddress };
        http.DefaultRequestHeaders.Authorization = new("Bearer", "alice-token");
        LongPollClient session = await LongPollClient.CreateAsync(http);
        Assert.Equal(Security.Identity.InboxPrefixOf("alice"), session.Created.GetProperty("inboxPrefix").GetString());
        Assert.Equal(2, backend.Calls("connect")); // cached: no third call
    }

    [Fact]
    public async Task The_subscribe_hook_refuses_per_topic_over_tcp_websocket_long_poll_and_sse()
    {
        await using HookBackend backend = await HookBackend.StartAsync(Decide);
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.Hooks.Subscribe.Url = backend.Url("subscribe");
            o.Hooks.Subscribe.Patterns = ["rooms.>"];
        });
        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(broker.Port);

        await using ProtocolClient tcp = await ProtocolClient.OpenAsync(broker.Port);
        await using ProtocolClient ws = await ProtocolClient.ConnectWebSocketAsync(broker.HttpPort);
        await ws.HelloAsync();
        foreach (ProtocolClient client in new[] { tcp, ws })
        {
            await client.SubscribeAsync(1, "rooms.open");
            await client.SubscribeAsync(2, "rooms.secret");
            await client.SubscribeAsync(3, "news.today"); // no hook reaches it: no call
            Frame refused = Assert.Single(await client.BarrierAsync());
            Assert.Equal(ErrorCode.PermissionDenied, refused.Error!.Value.Code);
            Assert.Contains("members only", refused.Error.Value.Message, StringComparison.Ordinal); // the backend's reason is told
        }

        LongPollClient poll = await LongPollClient.CreateAsync(broker.Http);
        await poll.SubscribeAsync(1, "rooms.open");
        using (HttpResponseMessage secret = await broker.Http.PostAsJsonAsync($"{poll.Base}/subscriptions", new { sid = 2, pattern = "rooms.secret" }))
        {
            Assert.Equal(HttpStatusCode.Forbidden, secret.StatusCode);
            Assert.Equal("PermissionDenied", (await secret.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("code").GetString());
        }

        using (HttpResponseMessage sse = await broker.Http.GetAsync("/sse?topic=rooms.open&topic=rooms.secret", HttpCompletionOption.ResponseHeadersRead))
        {
            Assert.Equal(HttpStatusCode.Forbidden, sse.StatusCode); // SSE: one topic refused, the stream is refused
        }

        await publisher.PublishAsync("rooms.open", "hi");
        await publisher.PublishAsync("news.today", "news");
        await publisher.PingPongAsync();
        foreach (ProtocolClient client in new[] { tcp, ws })
        {
            Assert.Equal(["rooms.open", "news.today"], (await client.PingPongAsync()).Select(m => m.Topic));
        }

        Assert.Equal(["rooms.open"], (await poll.PollAsync(0)).Messages.Select(m => m.Topic));
        Assert.Equal(8, backend.Calls("subscribe")); // rooms.open and rooms.secret on each of four transports
        Assert.All(backend.Questions, q => Assert.StartsWith("rooms.", q.Question.GetProperty("topic").GetString(), StringComparison.Ordinal));
        Assert.Equal(["tcp", "websocket", "longpoll", "sse"], backend.Questions.Select(q => q.Question.GetProperty("transport").GetString()).Distinct());
    }

    [Fact]
    public async Task The_publish_hook_refuses_and_keeps_each_publishers_order()
    {
        var gate = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        await using HookBackend backend = await HookBackend.StartAsync(async (hook, question) =>
        {
            string topic = question.GetProperty("topic").GetString()!;
            if (topic == "orders.first")
            {
                await gate.Task; // held until the test has sent what follows it
            }

            return topic == "orders.secret" ? """{"result":"refuse","reason":"closed"}""" : Allow;
        });
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.Hooks.Publish.Url = backend.Url("publish");
            o.Hooks.Publish.Patterns = ["orders.>"];
        });
        await using ProtocolClient subscriber = await ProtocolClient.OpenAsync(broker.Port);
        await subscriber.SubscribeAsync(1, ">");
        await subscriber.PingPongAsync();
        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Headers);

        await publisher.PublishAsync("orders.first", "1");
        await publisher.PublishAsync("free.second", "2"); // no hook: would be routed at once if the first did not hold it
        await publisher.PublishAsync("orders.secret", "3");
        await Until.True(() => backend.Calls("publish") == 1, "the backend asked about orders.first");
        gate.SetResult();
        Frame refused = Assert.Single(await publisher.BarrierAsync());
        Assert.Equal(ErrorCode.PermissionDenied, refused.Error!.Value.Code);
        Assert.Contains("closed", refused.Error.Value.Message, StringComparison.Ordinal);

        Assert.Equal(["orders.first", "free.second"], (await subscriber.PingPongAsync()).Select(m => m.Topic));
        JsonElement first = backend.Questions.First().Question;
        Assert.Equal((1, false), (first.GetProperty("size").GetInt32(), first.TryGetProperty("payload", out _))); // not the payload by default

        // Long-poll: a body of publications is decided together; one refused, none is routed.
        LongPollClient poll = await LongPollClient.CreateAsync(broker.Http);
        using (HttpResponseMessage denied = await poll.PublishAsync("orders.secret", "4"))
        {
            Assert.Equal(HttpStatusCode.Forbidden, denied.StatusCode);
        }

        using (HttpResponseMessage allowed = await poll.PublishAsync("orders.third", "5"))
        {
            Assert.Equal(HttpStatusCode.Accepted, allowed.StatusCode);
        }

        Assert.Equal(["orders.third"], (await subscriber.PingPongAsync()).Select(m => m.Topic));
    }

    [Fact]
    public async Task A_reply_a_request_permits_is_not_asked_about_and_arrives()
    {
        await using HookBackend backend = await HookBackend.StartAsync((hook, question) => Task.FromResult<string?>(hook == "connect"
            ? question.GetProperty("credential").GetString() == "caller"
                ? """{"result":"allow","identity":"caller","permissions":{"publish":["svc.echo"]}}"""
                : """{"result":"allow","identity":"responder","permissions":{"subscribe":["svc.echo"]}}"""
            : Allow));
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.Hooks.Connect.Url = backend.Url("connect");
            o.Hooks.Publish.Url = backend.Url("publish"); // every topic, the callers' inboxes included
        });
        await using ProtocolClient responder = await ProtocolClient.OpenAsync(broker.Port, auth: "responder");
        await responder.SubscribeAsync(1, "svc.echo");
        Assert.Empty(await responder.BarrierAsync());
        await using ProtocolClient caller = await ProtocolClient.ConnectAsync(broker.Port);
        string inbox = (await caller.HelloAsync(auth: "caller")).InboxPrefix!;
        await caller.SubscribeAsync(1, inbox + ".r1");
        Assert.Empty(await caller.BarrierAsync());

        await caller.PublishAsync("svc.echo", "ping", replyTo: inbox + ".r1");
        Frame request = await responder.ReadMessageAsync();
        await responder.PublishAsync(request.ReplyTo!, "pong"); // its permissions grant no publish: the request's reply permit does
        Assert.Empty(await responder.BarrierAsync());

        Assert.Equal("pong", (await caller.ReadMessageAsync()).Text);
        Assert.Equal(["svc.echo"], backend.Questions.Where(q => q.Hook == "publish").Select(q => q.Question.GetProperty("topic").GetString()));
    }

    [Fact]
    public async Task A_stalling_hook_refuses_only_the_clients_waiting_on_it_after_its_timeout_and_a_bystander_carries_on()
    {
        await using HookBackend backend = await HookBackend.StartAsync(Decide);
        await using TestBroker broker = await TestBroker.StartAsync(o =>
        {
            o.Hooks.Subscribe.Url = backend.Url("subscribe");
            o.Hooks.Subscribe.Patterns = ["rooms.>"];
            o.Hooks.Subscribe.Timeout = TimeSpan.FromSeconds(1); // room for the four questions to overlap on a loaded machine
            o.Hooks.Subscribe.MaxConcurrent = 2;
        });
        using MetricsProbe metrics = broker.Metrics();
        await using ProtocolClient bystander = await ProtocolClient.OpenAsync(broker.Port);
        await bystander.SubscribeAsync(1, "news.today");
        await bystander.PingPongAsync();

        var waiting = new List<ProtocolClient>();
        for (int i = 0; i < 4; i++)
        {
            waiting.Add(await ProtocolClient.OpenAsync(broker.Port));
        }

        for (int i = 0; i < waiting.Count; i++)
        {
            await waiting[i].SubscribeAsync(7, $"rooms.stall{i}"); // four questions at once, two over the cap
        }

        await Until.True(() => backend.Calls("subscribe") >= 2, "two stalled calls (the cap)");
        await bystander.PublishAsync("news.today", "still here"); // while the stalled hook holds the others
        Assert.Equal(["still here"], (await bystander.PingPongAsync()).Select(m => m.Text));

        foreach (ProtocolClient client in waiting)
        {
            Frame refused = Assert.Single(await client.BarrierAsync());
            Assert.Equal((ErrorCode.HookUnavailable, false, 7u), (refused.Error!.Value.Code, refused.Error.Value.Fatal, refused.Error.Value.Sid));
            await client.PublishAsync("news.today", "after"); // the refused client's connection carries on
            Assert.Empty(await client.PingPongAsync());
            await client.DisposeAsync();
        }

        Assert.Equal(["after", "after", "after", "after"], (await bystander.PingPongAsync()).Select(m => m.Text));
        // Never more than MaxConcurrent calls at once, as the broker holds them. The backend's own count may be higher
        // for a moment: it sees a timed-out call end only once it reads the cancelled connection's close, which a
        // loaded machine delays past the next call the freed slot lets in.
        Assert.Equal(2, metrics.Most("herald.hook.in_flight", "herald.hook", "subscribe"));
        Assert.Equal(0, metrics["herald.hook.in_flight", "herald.hook", "subscribe"]);
        long failures = metrics["herald.hook.failures", "herald.hook", "subscribe"];
        output.WriteLine($"backend calls {backend.Calls("subscribe")}, max in flight: broker {metrics.Most("herald.hook.in_flight", "herald.hook", "subscribe")}, backend {backend.MaxInFlight}; failures {failures} (timeout {metrics["herald.hook.failures", "herald.hook.failure", "timeout"]}, overloaded {metrics["herald.hook.failures", "herald.hook.failure", "overloaded"]})");
        Assert.Equal(4, failures);
    }

    [Fact]
    public async Task A_garbage_answer_is_a_failure_decided_by_the_policy()
    {
        await using HookBackend backend = await HookBackend.StartAsync(Decide);
        await using TestBroker refusing = await TestBroker.StartAsync(o =>
        {
            o.Hooks.Connect.Url = backend.Url("connect");
            o.Hooks.Subscribe.Url = backend.Url("subscribe");
        });
        await using TestBroker allowing = await TestBroker.StartAsync(o =>
        {
            o.Hooks.Subscribe.Url = backend.Url("subscribe");
            o.Hooks.Subscribe.FailurePolicy = HookFailurePolicy.Allow;
        });
        using MetricsProbe metrics = refusing.Metrics();

        await using ProtocolClient junk = await ProtocolClient.ConnectAsync(refusing.Port);
        await junk.SendAsync(w => FrameWriter.WriteHello(w, "junk", Capabilities.None, "junk"));
        await junk.ExpectClosedWithAsync(ErrorCode.HookUnavailable); // told apart from AuthenticationFailed

        using var http = new HttpClient { BaseAddress = refusing.Http.BaseAddress };
        http.DefaultRequestHeaders.Authorization = new("Bearer", "junk");
        using (HttpResponseMessage create = await http.PostAsync("/poll/sessions", null))
        {
            Assert.Equal(HttpStatusCode.ServiceUnavailable, create.StatusCode);
            Assert.Equal("HookUnavailable", (await create.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("code").GetString());
        }

        await using ProtocolClient refused = await ProtocolClient.OpenAsync(refusing.Port, auth: "alice-token");
        await refused.SubscribeAsync(1, "rooms.junk");
        Assert.Equal(ErrorCode.HookUnavailable, Assert.Single(await refused.BarrierAsync()).Error!.Value.Code);
        Assert.Equal(1, metrics["herald.hook.failures", "herald.hook", "subscribe"]);
        Assert.Equal(2, metrics["herald.hook.failures", "herald.hook", "connect"]);

        await using ProtocolClient allowed = await ProtocolClient.OpenAsync(allowing.Port);
        await allowed.SubscribeAsync(1, "rooms.junk");
        Assert.Empty(await allowed.BarrierAsync()); // the Allow policy: subscribed
        await allowed.PublishAsync("rooms.junk", "through");
        Assert.Equal("through", (await allowed.ReadMessageAsync()).Text);
    }

    [Fact]
    public async Task An_answer_cached_for_the_time_the_backend_says_makes_no_second_call()
    {
        await using HookBackend backend = await HookBackend.StartAsync(Decide);
        await using TestBroker broker = await TestBroker.StartAsync(o => o.Hooks.Subscribe.Url = backend.Url("subscribe"));
        using MetricsProbe metrics = broker.Metrics();
        await using ProtocolClient first = await ProtocolClient.OpenAsync(broker.Port);
        await using ProtocolClient second = await ProtocolClient.OpenAsync(broker.Port);

        await first.SubscribeAsync(1, "rooms.cached");
        await first.SubscribeAsync(2, "rooms.plain");
        Assert.Empty(await first.BarrierAsync());
        await second.SubscribeAsync(1, "rooms.cached");
        await second.SubscribeAsync(2, "rooms.plain");
        Assert.Empty(await second.BarrierAsync());

        Assert.Equal(3, backend.Calls("subscribe")); // rooms.cached once (cacheSeconds 60), rooms.plain each time
        Assert.Equal(1, metrics["herald.hook.cached", "herald.hook", "subscribe"]);
    }

    [Fact]
    public async Task A_publications_traceparent_reaches_the_backend()
    {
        await using HookBackend backend = await HookBackend.StartAsync(Decide);
        await using TestBroker broker = await TestBroker.StartAsync(o => o.Hooks.Publish.Url = backend.Url("publish"));
        await using ProtocolClient publisher = await ProtocolClient.OpenAsync(broker.Port, capabilities: Capabilities.Headers);
        const string traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

        await publisher.PublishAsync("orders.traced", "x", [new("traceparent", [traceParent])]);
        Assert.Empty(await publisher.BarrierAsync());

        (_, JsonElement question, string? received) = Assert.Single(backend.Questions);
        Assert.NotNull(received);
        Assert.Equal("4bf92f3577b34da6a3ce929d0e0e4736", received.Split('-')[1]); // the publication's trace
        Assert.Equal(traceParent, question.GetProperty("headers").GetProperty("traceparent")[0].GetString());
    }
}
