using Herald.Client;

namespace Herald.Client.Tests.Infrastructure;

/// <summary>One broker shared by the tests of a class (each test uses its own topics).</summary>
public sealed class BrokerFixture : IAsyncLifetime
{
    public TestBroker Broker { get; private set; } = null!;

    public async Task InitializeAsync() => Broker = await TestBroker.StartAsync();

    public async Task DisposeAsync() => await Broker.DisposeAsync();

    /// <summary>A client of the shared broker, over <paramref name="transport"/>.</summary>
    public HeraldClient Client(HeraldTransport transport, Action<HeraldClientOptions>? configure = null)
    {
        var options = new HeraldClientOptions { Url = Broker.Url(transport), ClientName = "test-" + transport };
        configure?.Invoke(options);
        return new HeraldClient(options);
    }
}

/// <summary>Topic names no other test uses.</summary>
public static class Topics
{
    private static int _next;

    public static string Unique(string prefix = "t") => $"{prefix}.{Interlocked.Increment(ref _next)}.{Guid.NewGuid():N}";
}
