namespace Herald.Testing;

/// <summary>The .NET client and CLI tests' ports: 30000-31999 (the broker tests have 32000-32767, the load tool's 20000-29999, the TypeScript suite 10000-19999).</summary>
public static partial class TestPorts
{
    private const int Low = 30_000;
    private const int High = 32_000;
}
