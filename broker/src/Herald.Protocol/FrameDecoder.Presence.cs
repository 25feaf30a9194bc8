using System.Buffers;
using MessagePack;

namespace Herald.Protocol;

/// <summary>The presence frames (spec §15.3): PRESENCE, which the broker reads, and PRESENCE_REPLY, which clients read.</summary>
public static partial class FrameDecoder
{
    /// <summary>
    /// Reads PRESENCE (after <see cref="ReadHeader"/>, spec §15.3): <c>[ 10, request_id: uint, topic: str, limit: uint,
    /// cursor: nil | str ]</c>. The topic is a slice of the body, checked for UTF-8 only (its rules are the broker's);
    /// a <c>limit</c> of any size is read (the broker serves at most <see cref="ProtocolConstants.MaxPresencePage"/>).
    /// </summary>
    public static PresenceFrame ReadPresence(ref MessagePackReader reader, int elementCount)
    {
        try
        {
            Require(elementCount, 5, "PRESENCE");
            uint requestId = reader.ReadUInt32();
            ReadOnlySequence<byte> topic = reader.ReadStringSequence() ?? ThrowNil<ReadOnlySequence<byte>>("topic");
            RequireUtf8(topic, "topic");
            ulong limit = reader.ReadUInt64();
            string? cursor = ReadString(ref reader, "cursor");
            SkipRest(ref reader, elementCount - 5);
            return new PresenceFrame(requestId, topic, limit, cursor);
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            return ThrowMalformed<PresenceFrame>("PRESENCE", e);
        }
    }

    /// <summary>
    /// Reads PRESENCE_REPLY (after <see cref="ReadHeader"/>, spec §15.3): <c>[ 11, request_id: uint32, code: uint,
    /// members: uint, identities: uint, entries: [ [client, identity, info], ... ], next: nil | str ]</c>. An entry
    /// may carry elements after its three (a later version's), skipped like a frame's.
    /// </summary>
    public static PresenceReplyFrame ReadPresenceReply(ref MessagePackReader reader, int elementCount)
    {
        try
        {
            Require(elementCount, 7, "PRESENCE_REPLY");
            uint requestId = reader.ReadUInt32();
            var code = (ErrorCode)reader.ReadUInt32();
            ulong members = reader.ReadUInt64();
            ulong identities = reader.ReadUInt64();
            int count = reader.ReadArrayHeader(); // MessagePack checks the count against the bytes left
            var entries = new List<PresenceEntry>(Math.Min(count, ProtocolConstants.MaxPresencePage));
            for (int i = 0; i < count; i++)
            {
                if (reader.NextMessagePackType != MessagePackType.Array)
                {
                    ThrowHelper.ThrowMalformed("PRESENCE_REPLY entry is not an array of [client, identity, info].");
                }

                int fields = reader.ReadArrayHeader();
                Require(fields, 3, "PRESENCE_REPLY entry");
                string client = ReadString(ref reader, "client") ?? ThrowNil<string>("client");
                string identity = ReadString(ref reader, "identity") ?? ThrowNil<string>("identity");
                string? info = ReadString(ref reader, "info");
                for (int extra = 3; extra < fields; extra++)
                {
                    Skip(ref reader, 1);
                }

                entries.Add(new PresenceEntry(client, identity, info));
            }

            string? next = ReadString(ref reader, "next");
            SkipRest(ref reader, elementCount - 7);
            return new PresenceReplyFrame(requestId, code, members, identities, entries, next);
        }
        catch (Exception e) when (IsDecodeFailure(e))
        {
            return ThrowMalformed<PresenceReplyFrame>("PRESENCE_REPLY", e);
        }
    }
}
