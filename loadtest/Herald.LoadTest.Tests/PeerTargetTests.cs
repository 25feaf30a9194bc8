using System.Globalization;
using Herald.LoadTest.Targets;

namespace Herald.LoadTest.Tests;

/// <summary>
/// The NATS and Redis targets beyond the shared contract: the server the tool starts is the real one, pinned
/// with --server-cpus, reported with its version, and gone after the target is disposed; an external server
/// that is not there is reported as unavailable.
/// </summary>
public class PeerTargetTests
{
    public static TheoryData<string, string> Peers => new() { { "nats", "nats-server 2." }, { "redis", "redis-server 7." } };

    [Theory]
    [MemberData(nameof(Peers))]
    public async Task A_started_server_is_pinned_reports_its_version_and_is_killed_on_dispose(string target, string versionPrefix)
    {
        Repo.EnsurePeerServers();
        int port = Repo.FreePorts(1);
        TargetOptions options = Repo.TargetOptionsOf(["--target", target, "--port", port.ToString(CultureInfo.InvariantCulture), "--server-cpus", "0", "--setup-timeout", "30"]);
        int pid;
        await using (ITarget started = await TargetFactory.StartAsync(options, CancellationToken.None))
        {
            Assert.StartsWith(versionPrefix, started.ServerDescription, StringComparison.Ordinal);
            Assert.StartsWith("taskset -c 0 ", started.ServerCommandLine, StringComparison.Ordinal);
            Assert.NotNull(started.ServerProcess);
            pid = started.ServerProcess.Id;
            if (OperatingSystem.IsLinux())
            {
                Assert.Equal(1L, (long)started.ServerProcess.ProcessorAffinity); // CPU 0 only
            }
            Assert.True(started.MaxPayload > 0);
        }

        Assert.False(Repo.IsRunning(pid));
    }

    [Theory]
    [MemberData(nameof(Peers))]
    public async Task An_external_server_that_is_not_there_is_unavailable(string target, string versionPrefix)
    {
        _ = versionPrefix;
        int port = Repo.FreePorts(1);
        TargetOptions options = Repo.TargetOptionsOf(["--target", target, "--server", "external", "--port", port.ToString(CultureInfo.InvariantCulture), "--setup-timeout", "5"]);
        await Assert.ThrowsAsync<TargetUnavailableException>(() => TargetFactory.StartAsync(options, CancellationToken.None));
    }

    [Fact]
    public async Task A_missing_server_executable_is_unavailable_with_the_install_command()
    {
        TargetUnavailableException e = await Assert.ThrowsAsync<TargetUnavailableException>(
            () => PeerServer.ReadVersionAsync("herald-no-such-server", "--version", "apt-get install -y herald-no-such-server", CancellationToken.None));
        Assert.Contains("apt-get install -y herald-no-such-server", e.Message, StringComparison.Ordinal);
    }
}
