using System.Diagnostics;
using Herald.LoadTest.Client;

namespace Herald.LoadTest.Scenarios;

/// <summary>Options every scenario shares: where the broker is and how long to wait for it.</summary>
internal sealed record BrokerOptions(string Host, int Port, int FirstPort, int LastPort, double SetupTimeoutSeconds, int? BrokerPid, bool Tls = false, string? TlsThumbprint = null)
{
    public const string Usage = """
          --host HOST            broker host or address                       (default 127.0.0.1)
          --port N               port of the publisher / responder connection (default 4502, or the first of --ports)
          --ports A-B            spread the other connections over ports A..B (default: all on --port)
          --setup-timeout S      give up connecting and subscribing after S s (default 30; exit code 3)
          --broker-pid PID       also report the broker process's CPU time (optional; same machine only)
          --tls                  speak TLS to the broker's TCP ports (Herald:Security:Tls:TcpPorts)
          --tls-thumbprint HEX   trust this server certificate (e.g. a self-signed one) besides the system's CAs
        """;

    /// <summary>"host:4502" or "host:4502-4534".</summary>
    public string PortsDisplay => FirstPort == LastPort ? $"{Host}:{FirstPort}" : $"{Host}:{FirstPort}-{LastPort}";

    public static BrokerOptions Read(CommandLine options)
    {
        string host = options.String("host", "127.0.0.1");
        int first, last;
        string? range = options.OptionalString("ports");
        if (range is null)
        {
            first = last = options.Int("port", 4502, 1, 65535);
        }
        else if (!BrokerEndpoints.TryParsePortRange(range, out first, out last))
        {
            throw new UsageException($"--ports must look like 4502-4534, got '{range}'.");
        }

        int port = options.Int("port", first, 1, 65535);
        double setup = options.Seconds("setup-timeout", 30, 1);
        int? pid = options.Has("broker-pid") ? options.Int("broker-pid", 0, 1) : null;
        return new BrokerOptions(host, port, first, last, setup, pid, options.Flag("tls"), options.OptionalString("tls-thumbprint"));
    }

    /// <summary>The broker process when <c>--broker-pid</c> names one that exists, for its CPU time.</summary>
    public Process? FindBrokerProcess()
    {
        if (BrokerPid is not { } pid)
        {
            return null;
        }

        try
        {
            return Process.GetProcessById(pid);
        }
        catch (ArgumentException)
        {
            Console.Error.WriteLine($"warning: no process with id {pid}; broker CPU will not be reported.");
            return null;
        }
    }
}
