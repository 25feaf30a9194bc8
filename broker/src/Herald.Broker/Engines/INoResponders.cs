namespace Herald.Broker.Engines;

/// <summary>Told, off the publisher's thread, that a request reached no subscriber on any node (spec §7 across nodes).</summary>
internal interface INoResponders
{
    void NoResponders(ReadOnlyMemory<byte> replyTo);
}
