using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using Herald.Broker.Tests.Infrastructure;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary><c>/healthz</c> and <c>/readyz</c> over real HTTP, through a real graceful stop.</summary>
public sealed class OperationsHealthTests
{
    [Fact]
    public async Task A_running_broker_is_alive_and_ready_and_names_its_listeners()
    {
        await using var broker = await TestBroker.StartAsync();

        using HttpResponseMessage alive = await broker.Monitoring.GetAsync("/healthz");
        using HttpResponseMessage ready = await broker.Monitoring.GetAsync("/readyz");

        Assert.Equal(HttpStatusCode.OK, alive.StatusCode);
        Assert.Equal(HttpStatusCode.OK, ready.StatusCode);
        JsonElement body = await ready.Content.ReadFromJsonAsync<JsonElement>();
        Assert.Equal("ready", body.GetProperty("status").GetString());
        Assert.Equal(broker.Port.ToString(System.Globalization.CultureInfo.InvariantCulture), body.GetProperty("tcp_ports").GetString());
        Assert.Equal(broker.HttpPort, body.GetProperty("http_port").GetInt32());
        Assert.Equal(broker.PolicyPort.ToString(System.Globalization.CultureInfo.InvariantCulture), body.GetProperty("policy").GetString());
        Assert.Equal("no-store", ready.Headers.CacheControl?.ToString());
    }

    [Fact]
    public async Task Readiness_turns_503_as_soon_as_shutdown_begins_while_liveness_stays_200()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Monitoring.DrainDelay = TimeSpan.FromSeconds(2));
        await using var client = await ProtocolClient.OpenAsync(broker.Port);
        using var http = new HttpClient { BaseAddress = broker.Monitoring.BaseAddress }; // its own connection: keep-alive ones are closed at stop
        using (HttpResponseMessage before = await http.GetAsync("/readyz"))
        {
            Assert.Equal(HttpStatusCode.OK, before.StatusCode);
        }

        Task stopping = broker.StopAsync();

        // Within the drain delay (the listeners are still open) readiness reports the shutdown.
        HttpResponseMessage draining = await Until.Value(
            () => http.GetAsync("/readyz"),
            response =>
            {
                bool done = response.StatusCode != HttpStatusCode.OK || stopping.IsCompleted;
                if (!done)
                {
                    response.Dispose(); // still ready: asked again
                }

                return done;
            },
            "/readyz stops answering 200 (or the stop completes)");

        using HttpResponseMessage alive = await http.GetAsync("/healthz");
        Assert.Equal(HttpStatusCode.ServiceUnavailable, draining.StatusCode);
        Assert.False(stopping.IsCompleted);
        Assert.Equal("draining", (await draining.Content.ReadFromJsonAsync<JsonElement>()).GetProperty("status").GetString());
        Assert.Equal(HttpStatusCode.OK, alive.StatusCode);
        draining.Dispose();

        // Meanwhile clients were told to go; after the drain delay the listeners close.
        await client.ExpectClosedWithAsync(ErrorCode.ShuttingDown);
        await stopping;
        await Assert.ThrowsAsync<HttpRequestException>(() => http.GetAsync("/readyz"));
    }

    [Fact]
    public async Task Health_answers_even_with_the_monitoring_endpoints_off()
    {
        await using var broker = await TestBroker.StartAsync(o => o.Monitoring.Enabled = false);

        using HttpResponseMessage ready = await broker.Monitoring.GetAsync("/readyz");
        using HttpResponseMessage varz = await broker.Monitoring.GetAsync("/varz");

        Assert.Equal(HttpStatusCode.OK, ready.StatusCode);
        Assert.Equal(HttpStatusCode.NotFound, varz.StatusCode);
    }
}
