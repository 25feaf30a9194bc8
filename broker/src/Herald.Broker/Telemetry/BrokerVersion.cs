using System.Reflection;

namespace Herald.Broker.Telemetry;

/// <summary>The broker's version, as telemetry (the service resource) and monitoring (<c>/varz</c>) report it.</summary>
internal static class BrokerVersion
{
    public static string Value { get; } = Read();

    private static string Read()
    {
        string? version = typeof(BrokerVersion).Assembly.GetCustomAttribute<AssemblyInformationalVersionAttribute>()?.InformationalVersion;
        if (string.IsNullOrEmpty(version))
        {
            return typeof(BrokerVersion).Assembly.GetName().Version?.ToString() ?? "0.0.0";
        }

        int plus = version.IndexOf('+', StringComparison.Ordinal);
        return plus < 0 ? version : version[..plus];
    }
}
