using System.Diagnostics;
using Xunit;

namespace Herald.Testing;

/// <summary>
/// The one way a test waits for something that must happen (nats-server's <c>checkFor</c>, nats.net's <c>Until</c>):
/// a condition polled at a short interval until it holds, for at most a bounded deadline, and a failure that says
/// what was awaited, for how long, and what was last seen. The deadline bounds a hang on a slow machine; it is never a
/// measure of speed. A sleep proves nothing, and absence is proved by a barrier (a PING/PONG or a marker sent after
/// the thing that must not arrive), not by waiting here.
/// </summary>
public static class Until
{
    /// <summary>How long a wait lasts unless the test says otherwise.</summary>
    public static readonly TimeSpan DefaultDeadline = TimeSpan.FromSeconds(30);

    private static readonly TimeSpan Interval = TimeSpan.FromMilliseconds(20);

    /// <summary>Waits until <paramref name="condition"/> holds; fails naming <paramref name="what"/> when it has not within <paramref name="within"/>.</summary>
    public static Task True(Func<bool> condition, string what, TimeSpan? within = null) =>
        True(() => Task.FromResult(condition()), what, within);

    /// <summary>Waits until <paramref name="condition"/> completes true; fails naming <paramref name="what"/> when it has not within <paramref name="within"/>.</summary>
    public static async Task True(Func<Task<bool>> condition, string what, TimeSpan? within = null) =>
        await Value(async () => await condition().ConfigureAwait(false), held => held, what, within).ConfigureAwait(false);

    /// <summary>
    /// Reads a value until <paramref name="done"/> accepts it and returns that value (a scrape, a JSON document, a
    /// list of spans...), so the test asserts on what it waited for; fails with the last value read when no read was
    /// accepted within <paramref name="within"/>.
    /// </summary>
    public static async Task<T> Value<T>(Func<Task<T>> read, Func<T, bool> done, string what, TimeSpan? within = null)
    {
        TimeSpan deadline = within ?? DefaultDeadline;
        var clock = Stopwatch.StartNew();
        while (true)
        {
            T value = await read().ConfigureAwait(false);
            if (done(value))
            {
                return value;
            }

            if (clock.Elapsed > deadline)
            {
                Assert.Fail($"Waited {deadline.TotalSeconds:0.###} s until {what}; it did not happen (last seen: {Describe(value)}).");
            }

            await Task.Delay(Interval).ConfigureAwait(false);
        }
    }

    private static string Describe<T>(T value) => value switch
    {
        null => "null",
        bool held => held ? "true" : "false",
        System.Collections.ICollection items => $"{items.Count} items",
        _ => Shortened(value.ToString() ?? ""),
    };

    private static string Shortened(string text) => text.Length > 500 ? text[..500] + "..." : text;
}
