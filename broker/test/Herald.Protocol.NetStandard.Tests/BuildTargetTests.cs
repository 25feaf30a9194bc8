using System.Reflection;
using System.Runtime.Versioning;
using Xunit;

namespace Herald.Protocol.Tests;

/// <summary>This suite runs what it says: every vector, split and fuzz test against Herald.Protocol's netstandard2.0 build.</summary>
public class BuildTargetTests
{
    [Fact]
    public void The_loaded_Herald_Protocol_is_the_netstandard2_0_build()
    {
        Assembly protocol = typeof(FrameReader).Assembly;

        Assert.Equal(".NETStandard,Version=v2.0", protocol.GetCustomAttribute<TargetFrameworkAttribute>()?.FrameworkName);
    }
}
