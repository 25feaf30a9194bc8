using System.Globalization;
using System.Net.Http.Json;
using System.Text.Json;
using Herald.Client.Tests.Infrastructure;

namespace Herald.Client.Tests.Integration;

/// <summary>
/// A long-poll answer that names subscriptions which may have lost messages (<c>Herald-Gaps</c>, longpoll §2: a
/// cluster node took the session over and could not resume them) is told to each as a resume that did not recover
/// (<see cref="HeraldSubscription.Resumed"/>, as a 410 status), and the messages go on. Against the real broker; the
/// test's HTTP handler adds the header to the first answer with messages, as a node taking the session over would.
/// </summary>
public class LongPollGapTests
{
    [Fact]
    public async Task A_subscription_named_in_Herald_Gaps_is_told_it_did_not_recover_and_its_messages_go_on()
    {
        await using TestBroker broker = await TestBroker.StartAsync(o => o.LongPoll.PollTimeout = TimeSpan.FromMilliseconds(500));
        var marking = new GapMarker();
        await using var client = new HeraldClient(broker.HttpUrl, new HeraldClientOptions { HttpMessageHandler = marking });
        await using var publisher = new HeraldClient(broker.TcpUrl);
        var resumes = new List<HeraldResumeEventArgs>();
        HeraldSubscription subscription = await client.SubscribeAsync("plain.gap");
        subscription.Resumed += (_, e) =>
        {
            lock (resumes)
            {
                resumes.Add(e);
            }
        };
        marking.Sid = marking.LastSid;
        await publisher.PublishAsync("plain.gap", "m1");
        await publisher.PublishAsync("plain.gap", "m2");

        Assert.Equal("m1", (await subscription.ReadAsync(Wait.Token())).GetString());
        Assert.Equal("m2", (await subscription.ReadAsync(Wait.Token())).GetString());
        Assert.True(marking.Marked);
        lock (resumes)
        {
            HeraldResumeEventArgs resume = Assert.Single(resumes);
            Assert.False(resume.Recovered);
        }
    }

    /// <summary>Adds <c>Herald-Gaps: &lt;sid&gt;</c> to the first poll answer that holds messages; remembers the sid last subscribed.</summary>
    private sealed class GapMarker() : DelegatingHandler(new SocketsHttpHandler())
    {
        public volatile bool Marked;

        public uint LastSid { get; private set; }

        public uint Sid { get; set; }

        protected override async Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        {
            if (request.Method == HttpMethod.Post && request.RequestUri!.AbsolutePath.EndsWith("/subscriptions", StringComparison.Ordinal) && request.Content is { } content)
            {
                using JsonDocument body = JsonDocument.Parse(await content.ReadAsStringAsync(cancellationToken));
                LastSid = body.RootElement.GetProperty("sid").GetUInt32();
            }

            HttpResponseMessage response = await base.SendAsync(request, cancellationToken);
            if (!Marked && Sid != 0 && request.RequestUri!.AbsolutePath.EndsWith("/messages", StringComparison.Ordinal)
                && response.Headers.TryGetValues("Herald-Count", out IEnumerable<string>? count) && count.Single() != "0")
            {
                Marked = true;
                response.Headers.Add("Herald-Gaps", Sid.ToString(CultureInfo.InvariantCulture));
            }

            return response;
        }
    }
}
