using System.Buffers;
using System.Collections;
using System.Diagnostics.CodeAnalysis;
using Herald.Protocol;

namespace Herald.Client;

/// <summary>
/// A message's headers (spec §4.9): keys, each with one or more string values, in the order they were
/// added. Immutable, like <see cref="System.Collections.Immutable.ImmutableDictionary{TKey, TValue}"/>:
/// <see cref="Add"/>, <see cref="Set"/> and <see cref="Remove"/> return a new instance, so one instance
/// may be shared between publications and threads.
/// <code>
/// HeraldHeaders headers = HeraldHeaders.Empty
///     .Add("Content-Type", "application/json")
///     .Add("X-Tag", "a")
///     .Add("X-Tag", "b");              // two values of one key
/// IReadOnlyList&lt;string&gt; tags = headers["x-tag"];   // ["a", "b"]: keys are found ignoring ASCII case
/// </code>
/// </summary>
/// <remarks>
/// Keys are 1 to 256 HTTP token characters (RFC 9110 <c>tchar</c>: letters, digits and
/// <c>!#$%&amp;'*+-.^_`|~</c>), kept as first spelled and unique ignoring ASCII case; keys starting with
/// <c>Herald-</c> are the broker's (a received no-responders status carries them) and cannot be added.
/// Values are any strings without CR or LF, empty allowed. What breaks these rules is an
/// <see cref="ArgumentException"/> at once, not an error from the broker later.
/// </remarks>
[SuppressMessage("Naming", "CA1710:Identifiers should have correct suffix", Justification = "Named as HttpHeaders is: a message's headers, not a general-purpose dictionary.")]
public sealed class HeraldHeaders : IReadOnlyDictionary<string, IReadOnlyList<string>>
{
    private static readonly SearchValues<char> TokenChars = SearchValues.Create("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");

    private readonly KeyValuePair<string, string[]>[] _entries;
    private byte[]? _encoded;

    private HeraldHeaders(KeyValuePair<string, string[]>[] entries, byte[]? encoded = null)
    {
        _entries = entries;
        _encoded = encoded;
    }

    /// <summary>No headers.</summary>
    public static HeraldHeaders Empty { get; } = new([]);

    /// <summary>How many keys.</summary>
    public int Count => _entries.Length;

    /// <summary>How many values over all keys (what the broker's <c>max_headers</c> counts).</summary>
    public int ValueCount
    {
        get
        {
            int values = 0;
            foreach (KeyValuePair<string, string[]> entry in _entries)
            {
                values += entry.Value.Length;
            }

            return values;
        }
    }

    /// <summary>The keys, as first spelled, in order.</summary>
    public IEnumerable<string> Keys => _entries.Select(static e => e.Key);

    /// <summary>The values of each key, in the order of <see cref="Keys"/>.</summary>
    public IEnumerable<IReadOnlyList<string>> Values => _entries.Select(static e => (IReadOnlyList<string>)e.Value);

    /// <summary>The values of <paramref name="key"/> (ignoring ASCII case).</summary>
    /// <exception cref="KeyNotFoundException">There is no such key.</exception>
    public IReadOnlyList<string> this[string key] =>
        TryGetValue(key, out IReadOnlyList<string>? values) ? values : throw new KeyNotFoundException($"There is no header '{key}'.");

    public bool ContainsKey(string key) => IndexOf(key) >= 0;

    public bool TryGetValue(string key, [MaybeNullWhen(false)] out IReadOnlyList<string> value)
    {
        int index = IndexOf(key);
        value = index >= 0 ? _entries[index].Value : null;
        return index >= 0;
    }

    /// <summary>The first value of <paramref name="key"/> (ignoring ASCII case), or <c>null</c> when there is no such key.</summary>
    public string? GetFirstValue(string key)
    {
        int index = IndexOf(key);
        return index >= 0 ? _entries[index].Value[0] : null;
    }

    /// <summary>These headers with <paramref name="value"/> added to <paramref name="key"/>'s values (the key added, at the end, if it is new).</summary>
    /// <exception cref="ArgumentException">The key or value breaks the rules (see the remarks).</exception>
    public HeraldHeaders Add(string key, string value)
    {
        CheckKey(key);
        CheckValue(key, value);
        int index = IndexOf(key);
        KeyValuePair<string, string[]>[] entries;
        if (index < 0)
        {
            entries = [.. _entries, new(key, [value])];
        }
        else
        {
            entries = [.. _entries];
            entries[index] = new(entries[index].Key, [.. entries[index].Value, value]);
        }

        return new HeraldHeaders(entries);
    }

    /// <summary>These headers with <paramref name="key"/>'s values replaced by <paramref name="value"/> (the key added, at the end, if it is new).</summary>
    /// <exception cref="ArgumentException">The key or value breaks the rules (see the remarks).</exception>
    public HeraldHeaders Set(string key, string value)
    {
        CheckKey(key);
        CheckValue(key, value);
        return SetUnchecked(key, value);
    }

    /// <summary>These headers without <paramref name="key"/> (ignoring ASCII case); the same instance if there is no such key.</summary>
    public HeraldHeaders Remove(string key)
    {
        int index = IndexOf(key);
        return index < 0 ? this : new HeraldHeaders([.. _entries.AsSpan(0, index), .. _entries.AsSpan(index + 1)]);
    }

    public IEnumerator<KeyValuePair<string, IReadOnlyList<string>>> GetEnumerator()
    {
        foreach (KeyValuePair<string, string[]> entry in _entries)
        {
            yield return new(entry.Key, entry.Value);
        }
    }

    IEnumerator IEnumerable.GetEnumerator() => GetEnumerator();

    /// <summary><c>Key: value, value; Key: value</c>.</summary>
    public override string ToString() => string.Join("; ", _entries.Select(static e => e.Key + ": " + string.Join(", ", e.Value)));

    /// <summary>Decodes a header block the shared decoder already validated (spec §4.9), copying it out of the read buffer; keys under <c>Herald-</c> included.</summary>
    internal static HeraldHeaders FromBlock(in ReadOnlySequence<byte> block) =>
        block.IsEmpty ? Empty : new HeraldHeaders([.. HeaderBlock.Read(block)], block.ToArray());

    /// <summary>Sets a value the caller has checked (trace context from the propagator: token keys, CR/LF-free values).</summary>
    internal HeraldHeaders SetUnchecked(string key, string value)
    {
        int index = IndexOf(key);
        KeyValuePair<string, string[]>[] entries = index < 0 ? [.. _entries, new(key, [value])] : [.. _entries];
        if (index >= 0)
        {
            entries[index] = new(entries[index].Key, [value]);
        }

        return new HeraldHeaders(entries);
    }

    /// <summary>The encoded block (spec §4.9), made once per instance; the block as received for received headers.</summary>
    internal byte[] Encoded() => _encoded ??= HeaderBlock.Encode(_entries);

    /// <summary>The first key under the broker's reserved prefix, or <c>null</c> (received headers may carry one; a publication may not).</summary>
    internal string? ReservedKey()
    {
        foreach (KeyValuePair<string, string[]> entry in _entries)
        {
            if (IsReserved(entry.Key))
            {
                return entry.Key;
            }
        }

        return null;
    }

    /// <summary>These headers without the broker's keys (a received message's position or status): what a publication passing them on carries.</summary>
    internal HeraldHeaders WithoutReserved() => new([.. _entries.Where(static e => !IsReserved(e.Key))]);

    private static bool IsReserved(string key) => key.StartsWith(HeaderBlock.ReservedPrefix, StringComparison.OrdinalIgnoreCase);

    private int IndexOf(string key)
    {
        ArgumentNullException.ThrowIfNull(key);
        for (int i = 0; i < _entries.Length; i++)
        {
            if (string.Equals(_entries[i].Key, key, StringComparison.OrdinalIgnoreCase))
            {
                return i;
            }
        }

        return -1;
    }

    private static void CheckKey(string key)
    {
        ArgumentNullException.ThrowIfNull(key);
        if (key.Length is 0 or > HeaderBlock.MaxKeyBytes || key.AsSpan().IndexOfAnyExcept(TokenChars) >= 0)
        {
            throw new ArgumentException($"Header key '{key}' is not 1 to {HeaderBlock.MaxKeyBytes} HTTP token characters (letters, digits and !#$%&'*+-.^_`|~; spec §4.9).", nameof(key));
        }

        if (IsReserved(key))
        {
            throw new ArgumentException($"Header key '{key}' is under the prefix '{HeaderBlock.ReservedPrefix}', which only the broker sets (spec §4.9).", nameof(key));
        }
    }

    private static void CheckValue(string key, string value)
    {
        ArgumentNullException.ThrowIfNull(value);
        if (value.AsSpan().IndexOfAny('\r', '\n') >= 0)
        {
            throw new ArgumentException($"A value of header '{key}' holds CR or LF, which header values may not (spec §4.9).", nameof(value));
        }
    }
}
