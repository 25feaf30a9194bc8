using System.Collections.Concurrent;
using System.Diagnostics;

// Compiled for netstandard2.0 only (see Herald.Client.csproj): members of newer runtimes that the client's shared
// sources use, each with the meaning it has there, so the sources read the same on both targets.
namespace Herald.Client;

[Microsoft.CodeAnalysis.Embedded]
internal static class RuntimeExtensions
{
    extension(Environment)
    {
        /// <summary>Milliseconds of a monotonic clock (.NET Core 3.0's <c>Environment.TickCount64</c>; here the <see cref="Stopwatch"/>'s).</summary>
        public static long TickCount64 => (long)(Stopwatch.GetTimestamp() * (1000.0 / Stopwatch.Frequency));
    }

    extension(Uri)
    {
        /// <summary>.NET 6's <c>Uri.UriSchemeWs</c>.</summary>
        public static string UriSchemeWs => "ws";

        /// <summary>.NET 6's <c>Uri.UriSchemeWss</c>.</summary>
        public static string UriSchemeWss => "wss";
    }

    extension(ValueTask)
    {
        /// <summary>.NET 5's <c>ValueTask.FromResult</c>.</summary>
        public static ValueTask<T> FromResult<T>(T result) => new(result);
    }

    extension(string)
    {
        /// <summary>.NET 6's <c>string.Create(IFormatProvider, ...)</c>: the interpolation formatted with <paramref name="provider"/>.</summary>
        public static string Create(IFormatProvider provider, FormattableString text) => text.ToString(provider);
    }

    extension(Task task)
    {
        /// <summary>.NET Core 2.0's <c>Task.IsCompletedSuccessfully</c>.</summary>
        public bool IsCompletedSuccessfully => task.Status == TaskStatus.RanToCompletion;
    }

    /// <summary>
    /// .NET 5's <c>ConcurrentDictionary.TryRemove(KeyValuePair)</c>: removes the entry only while the key still maps to
    /// that value, atomically (what <see cref="ICollection{T}.Remove"/> does on a <see cref="ConcurrentDictionary{TKey, TValue}"/>).
    /// </summary>
    public static bool TryRemove<TKey, TValue>(this ConcurrentDictionary<TKey, TValue> dictionary, KeyValuePair<TKey, TValue> item)
        where TKey : notnull =>
        ((ICollection<KeyValuePair<TKey, TValue>>)dictionary).Remove(item);
}
