using System.Reflection;
using NetArchTest.Rules;

namespace Herald.Broker.Tests;

/// <summary>
/// The broker's rooms depend on each other one way only, top to bottom (broker/ARCHITECTURE.md). A room
/// that starts to use one above it, a cycle, fails here, named with the types that do it. The check reads
/// the compiled IL (NetArchTest over Mono.Cecil), so a dependency hidden in a method body counts too.
/// </summary>
public sealed class LayeringTests
{
    /// <summary>Top to bottom. Transports' sub-rooms (Tcp, LongPoll) are one layer and must not use each other.</summary>
    public static readonly string[] Layers =
    [
        "Hosting",
        "Monitoring",
        "Policy",
        "Transports",
        "Sessions",
        "Cluster",
        "Engines",
        "History",
        "Security",
        "Routing",
        "Compression",
        "Delivery",
        "Telemetry",
    ];

    public static TheoryData<string> Rooms => [.. Layers.Skip(1)];

    private static readonly Assembly Broker = typeof(Herald.Broker.Hosting.HeraldOptions).Assembly;

    [Theory]
    [MemberData(nameof(Rooms))]
    public void A_room_depends_on_no_room_above_it(string room)
    {
        string[] above = Layers.TakeWhile(layer => layer != room).Select(layer => $"Herald.Broker.{layer}").ToArray();

        TestResult result = Types.InAssembly(Broker).That().ResideInNamespace($"Herald.Broker.{room}").ShouldNot().HaveDependencyOnAny(above).GetResult();

        Assert.True(result.IsSuccessful, $"Herald.Broker.{room} uses a room above it ({string.Join(", ", above)}): {string.Join(", ", result.FailingTypeNames ?? [])}");
    }

    [Fact]
    public void Every_room_is_in_the_layer_list()
    {
        string[] rooms = Broker.GetTypes()
            .Select(t => t.Namespace)
            .OfType<string>()
            .Where(ns => ns.StartsWith("Herald.Broker.", StringComparison.Ordinal))
            .Select(ns => ns["Herald.Broker.".Length..].Split('.')[0])
            .Distinct()
            .Order()
            .ToArray();

        Assert.Equal(Layers.Order(), rooms);
    }

    [Fact]
    public void The_transports_do_not_use_each_other()
    {
        Assert.True(Types.InAssembly(Broker).That().ResideInNamespace("Herald.Broker.Transports.Tcp").ShouldNot().HaveDependencyOn("Herald.Broker.Transports.LongPoll").GetResult().IsSuccessful);
        Assert.True(Types.InAssembly(Broker).That().ResideInNamespace("Herald.Broker.Transports.LongPoll").ShouldNot().HaveDependencyOn("Herald.Broker.Transports.Tcp").GetResult().IsSuccessful);
    }
}
