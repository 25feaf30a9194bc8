using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text.Json;
using Herald.Broker.Hosting;
using Herald.Broker.Tests.Infrastructure;
using Microsoft.Extensions.Configuration;

namespace Herald.Broker.Tests;

/// <summary>
/// What an operator sees when the start goes wrong (issue 13 point 7): a taken port is one line naming the
/// port and its setting; a key under <c>Herald:</c> that nothing binds is named with what it likely meant.
/// The broker runs as a real process, as an operator starts it.
/// </summary>
public sealed class OperationsStartupTests
{
    [Theory]
    [InlineData("Herald:Tcp:PortRangeStart..PortRangeEnd")]
    [InlineData("Herald:Http:Port")]
    [InlineData("Herald:Policy:Port")]
    [InlineData("Herald:Monitoring:Port")]
    public async Task A_port_in_use_stops_the_broker_with_one_line_naming_the_port_and_its_setting(string setting)
    {
        using var holder = new TcpListener(IPAddress.Loopback, 0); // another process's listener, in effect
        holder.Start();
        int port = ((IPEndPoint)holder.LocalEndpoint).Port;
        string p = port.ToString(CultureInfo.InvariantCulture);
        string[] args = setting switch
        {
            "Herald:Tcp:PortRangeStart..PortRangeEnd" => [$"--Herald:Tcp:PortRangeStart={p}", $"--Herald:Tcp:PortRangeEnd={p}"],
            "Herald:Http:Port" => ["--Herald:Http:Host=127.0.0.1", $"--Herald:Http:Port={p}"],
            "Herald:Policy:Port" => [$"--Herald:Policy:Port={p}"],
            _ => ["--Herald:Monitoring:Host=127.0.0.1", $"--Herald:Monitoring:Port={p}"],
        };

        await using var broker = BrokerProcess.StartTcpOnly("text", args);

        Assert.NotEqual(0, await broker.WaitForExitAsync());
        string line = Assert.Single(broker.Stderr);
        Assert.Equal($"Herald cannot start: Port {p} on 127.0.0.1 ({setting}) is already in use (another process, or another Herald, listens there).", line);
        string[] all = [.. broker.Stdout, .. broker.Stderr];
        Assert.DoesNotContain(all, l => l.StartsWith("   at ", StringComparison.Ordinal) || l.Contains("Exception", StringComparison.Ordinal)); // no .NET stack dump, on either stream
    }

    [Fact]
    public async Task An_unknown_key_under_Herald_is_warned_at_start_with_the_closest_known_key_and_known_keys_are_not()
    {
        await using var broker = BrokerProcess.StartTcpOnly(
            "json",
            "--Herald:Limits:MaxFrameByte=100",                      // a typo of a setting
            "--Herald:Security:Auth:Tokens:0:Nmae=reader",           // a typo inside a list item
            "--Herald:Security:Auth:Tokens:0:Permissions:Publish:0=a.>", // known keys, a list inside a list item
            "--Herald:Policy:AllowedDomains:0=example.com",          // a known array item
            "--Herald:Limitz:MaxFrameBytes=100",                     // a typo of a section
            "--Herald:Limits:MaxFrameBytes=1048576",                 // known
            "--Herald:Whatever=1");                                  // nothing like any setting

        await broker.WaitForEventAsync(1001); // the warnings come before the listening line

        string[] warnings = [.. Events(broker, 1003).Select(e => e.GetProperty("@m").GetString()!)];
        Assert.Equal(4, warnings.Length);
        Assert.Contains(warnings, w => w.Contains("\"Herald:Limits:MaxFrameByte\"", StringComparison.Ordinal) && w.Contains("did you mean Herald:Limits:MaxFrameBytes?", StringComparison.Ordinal));
        Assert.Contains(warnings, w => w.Contains("\"Herald:Security:Auth:Tokens:0:Nmae\"", StringComparison.Ordinal) && w.Contains("did you mean Herald:Security:Auth:Tokens:0:Name?", StringComparison.Ordinal));
        Assert.Contains(warnings, w => w.Contains("\"Herald:Limitz\"", StringComparison.Ordinal) && w.Contains("did you mean Herald:Limits?", StringComparison.Ordinal));
        Assert.Contains(warnings, w => w.Contains("\"Herald:Whatever\"", StringComparison.Ordinal) && !w.Contains("did you mean", StringComparison.Ordinal));
    }

    [Fact]
    public async Task With_StrictConfiguration_an_unknown_key_stops_the_start()
    {
        await using var broker = BrokerProcess.StartTcpOnly("text", "--Herald:StrictConfiguration=true", "--Herald:Limits:MaxFrameByte=100");

        Assert.Equal(2, await broker.WaitForExitAsync());
        Assert.Contains(broker.Stderr, l => l.Contains("Herald:Limits:MaxFrameByte is not a Herald setting (did you mean Herald:Limits:MaxFrameBytes?)", StringComparison.Ordinal));
        Assert.DoesNotContain(broker.Stdout, l => l.Contains("listening for TCP", StringComparison.Ordinal));
    }

    [Fact]
    public async Task A_value_that_is_not_of_its_settings_type_stops_the_start_with_a_line_naming_it_and_no_stack()
    {
        await using var broker = BrokerProcess.StartTcpOnly("text", "--Herald:Limits:MaxPendingMessages=lots");

        Assert.Equal(2, await broker.WaitForExitAsync());
        Assert.Contains(broker.Stderr, l => l.Contains("'lots' at 'Herald:Limits:MaxPendingMessages'", StringComparison.Ordinal));
        Assert.DoesNotContain([.. broker.Stdout, .. broker.Stderr], l => l.StartsWith("   at ", StringComparison.Ordinal));
    }

    [Fact]
    public async Task The_shipped_appsettings_and_every_setting_the_options_bind_are_known()
    {
        // Every leaf of a fully filled configuration (one list item each) is known: no warning names any.
        await using var broker = BrokerProcess.StartTcpOnly(
            "json",
            "--Herald:Security:Auth:Tokens:0:Name=reader",
            "--Herald:Security:Auth:Tokens:0:Sha256=" + new string('a', 64),
            "--Herald:Security:Auth:Tokens:0:Permissions:Subscribe:0=a.>",
            "--Herald:Security:Auth:Jwt:ClockSkew=00:00:30",
            "--Herald:Security:Tls:HandshakeTimeout=00:00:10",
            "--Herald:Telemetry:Otlp:Traces=true",
            "--Herald:StrictConfiguration=false");

        await broker.WaitForEventAsync(1001);

        Assert.Empty(Events(broker, 1003));
    }

    [Fact]
    public void The_README_configuration_table_lists_every_setting_and_no_other()
    {
        // "| `Herald:Compression:FastMaxBytes` / `FastLevel` | ..." names two settings; the second is a sibling of the first.
        var documented = new HashSet<string>(StringComparer.OrdinalIgnoreCase);
        foreach (string row in File.ReadLines(Path.Combine(AppContext.BaseDirectory, "README.md")).Where(l => l.StartsWith("| `Herald:", StringComparison.Ordinal)))
        {
            string[] names = row.Split('|')[1].Split('/').Select(n => n.Trim().Trim('`')).ToArray();
            string parent = names[0][..names[0].LastIndexOf(':')];
            documented.UnionWith(names.Select(n => n.StartsWith("Herald:", StringComparison.Ordinal) ? n : parent + ":" + n));
        }

        IConfigurationSection herald = new ConfigurationBuilder()
            .AddInMemoryCollection(documented.Select(k => new KeyValuePair<string, string?>(k, "x")))
            .Build().GetSection(HeraldOptions.Section);
        Assert.Empty(ConfigurationKeys.Unknown<HeraldOptions>(herald).Select(k => k.Path)); // every row is a setting...
        string[] undocumented = [.. ConfigurationKeys.Settings<HeraldOptions>(HeraldOptions.Section).Where(s => !documented.Contains(s))];
        Assert.Empty(undocumented); // ...and every setting has a row
    }

    private static IEnumerable<JsonElement> Events(BrokerProcess broker, int id)
    {
        foreach (string line in broker.Stdout.Where(l => l.StartsWith('{')))
        {
            using JsonDocument document = JsonDocument.Parse(line);
            if (document.RootElement.TryGetProperty("EventId", out JsonElement eventId) && eventId.GetProperty("Id").GetInt32() == id)
            {
                yield return document.RootElement.Clone();
            }
        }
    }
}
