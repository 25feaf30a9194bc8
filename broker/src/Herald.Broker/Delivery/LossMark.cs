using System.Globalization;
using System.Text;

namespace Herald.Broker.Delivery;

/// <summary>
/// A loss a polled session is told of (protocol-spec/longpoll.md §2): <see cref="Dropped"/> messages counted as lost
/// (shed on their way in from another node), and <see cref="Gaps"/>, the sids that may have lost an unknown number
/// (a takeover re-made them without a history position to resume from).
/// </summary>
/// <remarks>
/// <para>
/// A window backlog (long-poll) keeps a mark as an entry of its own, with a sequence number, sid
/// <see cref="Sid"/> and these bytes as its frame, where it happened among the messages: a poll reports the marks at
/// the start of what it takes (a take ends before a later one), and the client's ack moves past the mark as past a
/// message, so a lost response brings it again and an acknowledged one is gone. A window backlog queues no control
/// frames, so sid 0 there is always a mark. In a shared session the same entry goes into the session's stream in
/// Redis, signed as every entry is.
/// </para>
/// <para>Its bytes: ASCII <c>&lt;dropped&gt;;&lt;sid&gt;,&lt;sid&gt;...</c> (<c>5;</c>, <c>0;1,3</c>).</para>
/// </remarks>
internal readonly record struct LossMark(long Dropped, uint[] Gaps)
{
    /// <summary>The sid of a mark's entry in a window backlog or a shared session's stream.</summary>
    public const uint Sid = FrameCopy.ControlSid;

    /// <summary>No loss.</summary>
    public static LossMark None => new(0, []);

    /// <summary>The mark's bytes.</summary>
    public byte[] ToBytes()
    {
        var text = new StringBuilder();
        text.Append(Dropped.ToString(CultureInfo.InvariantCulture)).Append(';');
        for (int i = 0; i < Gaps.Length; i++)
        {
            text.Append(i > 0 ? "," : "").Append(Gaps[i].ToString(CultureInfo.InvariantCulture));
        }

        return Encoding.ASCII.GetBytes(text.ToString());
    }

    /// <summary>A mark's entry, held once by the caller.</summary>
    public MessageBuffer ToFrame() => MessageBuffer.Copy(ToBytes());

    /// <summary>Reads a mark's bytes; an entry that is not one (a writer that is not a node) reads as one unknown loss of the whole session.</summary>
    public static LossMark Read(ReadOnlySpan<byte> bytes)
    {
        string text = Encoding.ASCII.GetString(bytes);
        int semicolon = text.IndexOf(';', StringComparison.Ordinal);
        if (semicolon < 0 || !long.TryParse(text.AsSpan(0, semicolon), NumberStyles.None, CultureInfo.InvariantCulture, out long dropped))
        {
            return new LossMark(1, []);
        }

        var gaps = new List<uint>();
        foreach (string part in text[(semicolon + 1)..].Split(',', StringSplitOptions.RemoveEmptyEntries))
        {
            if (uint.TryParse(part, NumberStyles.None, CultureInfo.InvariantCulture, out uint sid))
            {
                gaps.Add(sid);
            }
        }

        return new LossMark(dropped, [.. gaps]);
    }

    /// <summary>Both losses as one: the counts added, the sids joined (each once, in order).</summary>
    public LossMark Merge(LossMark other)
    {
        if (other.Gaps.Length == 0)
        {
            return this with { Dropped = Dropped + other.Dropped };
        }

        var gaps = new SortedSet<uint>(Gaps);
        gaps.UnionWith(other.Gaps);
        return new LossMark(Dropped + other.Dropped, [.. gaps]);
    }
}
