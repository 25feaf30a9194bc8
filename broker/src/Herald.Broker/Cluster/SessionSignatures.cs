using System.Collections.Concurrent;
using System.Globalization;
using System.Security.Cryptography;
using System.Text;

namespace Herald.Broker.Cluster;

/// <summary>
/// With <c>Herald:Cluster:Secret</c>, what a shared long-poll session keeps in or sends through Redis carries a tag
/// made with the cluster's secret (<see cref="EnvelopeSigner"/>, spec cluster.md §10), so that access to Redis alone
/// cannot deliver into a session or act as one:
/// <list type="bullet">
/// <item>a backlog entry (<c>lq:</c>): field <c>t</c>, the tag for the path <c>lq</c> over the session's token, the
/// entry's sequence and sid, and the frame's SHA-256; a poll skips (and counts) an entry whose tag is missing or wrong, or that was copied to another
/// session or sequence;</item>
/// <item>a command (<c>.lpc:</c>) and its reply (<c>.lpr:</c>): the 16-byte tag, then the JSON, tagged for the path
/// <c>lpc:&lt;node&gt;</c> (<c>lpr:</c>) of the node it is sent to, so it is good for that node only. A command also carries a nonce and the
/// sender's deadline: its owner refuses one it has seen, or one past its deadline (<see cref="CommandMemory"/>).</item>
/// </list>
/// Without a secret nothing is tagged (and nothing checked), as for envelopes.
/// </summary>
internal static class SessionSignatures
{
    /// <summary>The tag's size: an envelope's.</summary>
    public const int TagSize = EnvelopeSigner.TagSize;

    /// <summary><paramref name="json"/> as sent on the channel <paramref name="path"/> names (<c>lpc:&lt;node&gt;</c>, <c>lpr:&lt;node&gt;</c>): as it is, or after its tag.</summary>
    public static byte[] Seal(EnvelopeSigner? signer, string path, byte[] json)
    {
        if (signer is null)
        {
            return json;
        }

        byte[] sealedBody = new byte[TagSize + json.Length];
        json.CopyTo(sealedBody, TagSize);
        lock (signer)
        {
            signer.Tag(path, json, sealedBody.AsSpan(0, TagSize));
        }

        return sealedBody;
    }

    /// <summary>The JSON of <paramref name="body"/> received on the channel <paramref name="path"/> names; false if its tag is not the secret's for it.</summary>
    public static bool TryOpen(EnvelopeSigner? signer, string path, byte[] body, out ReadOnlyMemory<byte> json)
    {
        if (signer is null)
        {
            json = body;
            return true;
        }

        json = default;
        if (body.Length <= TagSize)
        {
            return false;
        }

        bool valid;
        lock (signer)
        {
            valid = signer.Check(path, body.AsSpan(TagSize), body.AsSpan(0, TagSize));
        }

        json = body.AsMemory(TagSize);
        return valid;
    }

    /// <summary>
    /// Writes the tag of a backlog message into <paramref name="tag"/>, from its frame's SHA-256
    /// (<paramref name="frameHash"/>: a frame going to many sessions is hashed once). Caller owns <paramref name="signer"/>.
    /// </summary>
    public static void TagEntry(EnvelopeSigner signer, string token, long sequence, uint sid, ReadOnlySpan<byte> frameHash, Span<byte> tag) =>
        signer.Tag(EntryPath, EntryData(token, sequence, sid, frameHash), tag);

    /// <summary>Whether a backlog message's tag is the one the secret gives (caller owns <paramref name="signer"/>).</summary>
    public static bool VerifyEntry(EnvelopeSigner signer, string token, long sequence, uint sid, ReadOnlySpan<byte> frame, ReadOnlySpan<byte> tag)
    {
        Span<byte> hash = stackalloc byte[SHA256.HashSizeInBytes];
        SHA256.HashData(frame, hash);
        return signer.Check(EntryPath, EntryData(token, sequence, sid, hash), tag);
    }

    private const string EntryPath = "lq";

    /// <summary>What a message's tag covers: <c>&lt;token&gt;\0&lt;seq&gt;\0&lt;sid&gt;\0</c> then the SHA-256 of the frame (so the frame is read once, never copied).</summary>
    private static byte[] EntryData(string token, long sequence, uint sid, ReadOnlySpan<byte> frameHash)
    {
        byte[] label = Encoding.UTF8.GetBytes(string.Create(CultureInfo.InvariantCulture, $"{token}\0{sequence}\0{sid}\0"));
        byte[] data = new byte[label.Length + SHA256.HashSizeInBytes];
        label.CopyTo(data, 0);
        frameHash.CopyTo(data.AsSpan(label.Length));
        return data;
    }
}

/// <summary>
/// The commands a node has carried out, by nonce, until their deadline: one seen again (a replay) is refused; one
/// past its deadline is refused too, so the memory needs to hold a nonce no longer than the deadline it came with.
/// Forgotten in sweeps, at most once a second, when it holds more than a few.
/// </summary>
internal sealed class CommandMemory
{
    private readonly ConcurrentDictionary<string, long> _seen = new(StringComparer.Ordinal);
    private long _nextSweep;

    /// <summary>How many nonces are remembered now.</summary>
    public int Count => _seen.Count;

    /// <summary>True the first time <paramref name="nonce"/> comes, before <paramref name="deadline"/> (Unix ms, the sender's); false for a replay.</summary>
    public bool Admit(string nonce, long deadline, long now)
    {
        if (_seen.Count > 256 && now >= Interlocked.Read(ref _nextSweep))
        {
            Interlocked.Exchange(ref _nextSweep, now + 1000);
            foreach (KeyValuePair<string, long> seen in _seen)
            {
                if (seen.Value < now)
                {
                    _seen.TryRemove(seen);
                }
            }
        }

        return _seen.TryAdd(nonce, deadline);
    }
}
