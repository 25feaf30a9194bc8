using MessagePack;

namespace Herald.Protocol;

/// <summary>ERROR (spec §4.8), which clients read: its optional sid and sids.</summary>
public static partial class FrameDecoder
{
    public static ErrorFrame ReadError(ref MessagePackReader reader, int elementCount)
    {
        try
        {
            Require(elementCount, 5, "ERROR");
            var code = (ErrorCode)reader.ReadUInt32();
            bool fatal = reader.ReadBoolean();
            string message = ReadString(ref reader, "message") ?? ThrowNil<string>("message");
            ulong count = reader.ReadUInt64();
            uint sid = 0;
            if (elementCount > 5)
            {
                if (reader.NextMessagePackType == MessagePackType.Integer)
                {
                    sid = reader.ReadUInt32();
                }
                else
                {
                    Skip(ref reader, 0); // nil, or a shape this version does not know: no sid
                }
            }

            uint[]? sids = null;
            if (elementCount > 6)
            {
                if (reader.NextMessagePackType == MessagePackType.Array)
                {
                    sids = ReadSids(ref reader);
                }
                else
                {
                    Skip(ref reader, 0); // nil, or a shape this version does not know: no sids
                }
            }

            SkipRest(ref reader, elementCount - 7);
            return new ErrorFrame(code, fatal, message, count, sid) { Sids = sids };
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            return ThrowMalformed<ErrorFrame>("ERROR", e);
        }
    }

    /// <summary>
    /// ERROR's seventh element (spec §4.8): an array of sids, each an integer from 1 to 2^32-1; anything else in it is
    /// malformed (a misread sid would tell the wrong subscription it lost messages).
    /// </summary>
    private static uint[] ReadSids(ref MessagePackReader reader)
    {
        int length = reader.ReadArrayHeader();
        if (length > reader.Sequence.Length - reader.Consumed)
        {
            ThrowHelper.ThrowMalformed($"ERROR announces {length} sids, more than its body holds.");
        }

        var sids = new uint[length];
        for (int i = 0; i < length; i++)
        {
            sids[i] = reader.ReadUInt32();
            if (sids[i] == 0)
            {
                ThrowHelper.ThrowMalformed("ERROR names sid 0 among its sids.");
            }
        }

        return sids;
    }
}
