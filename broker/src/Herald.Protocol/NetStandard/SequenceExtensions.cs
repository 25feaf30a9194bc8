// Compiled for netstandard2.0 only (see Herald.Protocol.csproj): .NET Core 2.1's ReadOnlySequence<T>.FirstSpan,
// so the shared sources read the same on both targets.
namespace System.Buffers;

[Microsoft.CodeAnalysis.Embedded]
internal static class SequenceExtensions
{
    extension<T>(ReadOnlySequence<T> sequence)
    {
        /// <summary>The first segment's span.</summary>
        public ReadOnlySpan<T> FirstSpan => sequence.First.Span;
    }
}
