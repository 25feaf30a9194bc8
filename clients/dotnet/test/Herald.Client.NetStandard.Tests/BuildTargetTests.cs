using System.Reflection;
using System.Runtime.Versioning;
using Herald.Protocol;

namespace Herald.Client.Tests;

/// <summary>This suite runs what it says: Herald.Client's netstandard2.0 build, beside the broker's net10.0 Herald.Protocol.</summary>
public class BuildTargetTests
{
    [Fact]
    public void The_loaded_Herald_Client_is_the_netstandard2_0_build()
    {
        Assembly client = typeof(HeraldClient).Assembly;

        Assert.Equal(".NETStandard,Version=v2.0", client.GetCustomAttribute<TargetFrameworkAttribute>()?.FrameworkName);
    }

    [Fact]
    public void The_loaded_Herald_Protocol_is_the_brokers_net10_0_build()
    {
        Assembly protocol = typeof(FrameReader).Assembly;

        Assert.Equal(".NETCoreApp,Version=v10.0", protocol.GetCustomAttribute<TargetFrameworkAttribute>()?.FrameworkName);
    }
}
