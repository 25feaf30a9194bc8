using Herald.Broker.Compression;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Testing;

/// <summary>
/// The CPU load an in-process test broker's compression advisor reads: always idle. The broker shares its
/// process with the whole test run, so the process CPU it would sample is the suite's, not its own, and a
/// busy machine would turn compression off under a test that asserts it. The CPU back-off itself is tested
/// on the advisor with a fixed load (CompressionTests).
/// </summary>
public sealed class QuietCpu : ICpuLoad
{
    public double Current => 0;

    /// <summary>For <c>HeraldHost.Build</c>'s overrides: registers the quiet load in place of the process's.</summary>
    public static void Install(IServiceCollection services) => services.AddSingleton<ICpuLoad, QuietCpu>();
}
