// Compiled for netstandard2.0 only (see Herald.Protocol.csproj; Herald.Client links it too): the part of .NET 8's
// SearchValues that Herald uses (sets of ASCII bytes or chars), as a 128-entry table, so the shared sources read
// the same on both targets. The net10.0 builds (the broker's) use the runtime's vectorised SearchValues.
namespace System.Buffers;

[Microsoft.CodeAnalysis.Embedded]
internal static class SearchValues
{
    public static SearchValues<byte> Create(ReadOnlySpan<byte> values)
    {
        var set = new SearchValues<byte>();
        foreach (byte value in values)
        {
            set.Add(value);
        }
        return set;
    }

    public static SearchValues<char> Create(ReadOnlySpan<char> values)
    {
        var set = new SearchValues<char>();
        foreach (char value in values)
        {
            set.Add(value);
        }
        return set;
    }
}

/// <summary>A set of ASCII values (only ASCII is ever added); read-only once built.</summary>
[Microsoft.CodeAnalysis.Embedded]
internal sealed class SearchValues<T>
    where T : struct
{
    private readonly bool[] _contains = new bool[128];

    internal void Add(int value) => _contains[value] = true;

    internal bool Contains(int value) => value < _contains.Length && _contains[value];
}

[Microsoft.CodeAnalysis.Embedded]
internal static class SearchValuesExtensions
{
    /// <summary>The index of the first byte of <paramref name="span"/> not in <paramref name="values"/>, or -1.</summary>
    public static int IndexOfAnyExcept(this ReadOnlySpan<byte> span, SearchValues<byte> values)
    {
        for (int i = 0; i < span.Length; i++)
        {
            if (!values.Contains(span[i]))
            {
                return i;
            }
        }
        return -1;
    }

    /// <summary>The index of the first char of <paramref name="span"/> not in <paramref name="values"/>, or -1.</summary>
    public static int IndexOfAnyExcept(this ReadOnlySpan<char> span, SearchValues<char> values)
    {
        for (int i = 0; i < span.Length; i++)
        {
            if (!values.Contains(span[i]))
            {
                return i;
            }
        }
        return -1;
    }
}
