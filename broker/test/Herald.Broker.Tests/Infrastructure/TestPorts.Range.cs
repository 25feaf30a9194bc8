namespace Herald.Testing;

/// <summary>The broker tests' ports: 32000-32767 (the .NET client tests have 30000-31999, the load tool's 20000-29999, the TypeScript suite 10000-19999).</summary>
public static partial class TestPorts
{
    private const int Low = 32_000;
    private const int High = 32_768;
}
