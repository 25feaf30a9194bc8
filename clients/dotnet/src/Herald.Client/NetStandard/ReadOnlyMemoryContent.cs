using System.Runtime.InteropServices;

// Compiled for netstandard2.0 only (see Herald.Client.csproj): .NET Core 2.1's ReadOnlyMemoryContent, as a
// ByteArrayContent over the memory's array (no copy when the memory is backed by one, as the client's always are).
namespace System.Net.Http;

[Microsoft.CodeAnalysis.Embedded]
internal sealed class ReadOnlyMemoryContent : ByteArrayContent
{
    public ReadOnlyMemoryContent(ReadOnlyMemory<byte> content)
        : this(Segment(content))
    {
    }

    private ReadOnlyMemoryContent(ArraySegment<byte> content)
        : base(content.Array!, content.Offset, content.Count)
    {
    }

    private static ArraySegment<byte> Segment(ReadOnlyMemory<byte> content) =>
        MemoryMarshal.TryGetArray(content, out ArraySegment<byte> segment) ? segment : new ArraySegment<byte>(content.ToArray());
}
