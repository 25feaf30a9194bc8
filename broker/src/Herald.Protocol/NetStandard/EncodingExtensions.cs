using System.Buffers;

// Compiled for netstandard2.0 only (see Herald.Protocol.csproj): .NET 5's Encoding.GetString over a
// ReadOnlySequence<byte>, so the shared sources read the same on both targets.
namespace System.Text;

[Microsoft.CodeAnalysis.Embedded]
internal static class EncodingExtensions
{
    extension(Encoding encoding)
    {
        /// <summary>Decodes a whole sequence (one copy when it has several segments).</summary>
        public string GetString(in ReadOnlySequence<byte> bytes) =>
            bytes.IsSingleSegment ? encoding.GetString(bytes.First.Span) : encoding.GetString(bytes.ToArray());
    }
}
