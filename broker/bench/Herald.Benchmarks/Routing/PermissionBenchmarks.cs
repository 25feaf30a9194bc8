using System.Buffers;
using BenchmarkDotNet.Attributes;
using Herald.Broker.Routing;
using Herald.Broker.Security;

namespace Herald.Benchmarks.Routing;

/// <summary>
/// What isolation adds to one request/reply between two restricted identities (spec §7, §12), as
/// <c>ProtocolSession.Check</c> and the router do it: the caller's PUBLISH (topic granted, reply_to one it
/// may subscribe to), the reply permission recorded as the request is delivered to the responder, and the
/// responder's reply (not granted, so its permission is spent). Against an allow-all identity, which pays
/// one flag test. Figures are per call; the loadtest's <c>auth-cost.sh</c> sets them beside a call's cost.
/// </summary>
[MemoryDiagnoser]
public class PermissionBenchmarks
{
    private static readonly ReadOnlySequence<byte> RequestTopic = new("bench.rpc.0"u8.ToArray());
    private static readonly ReadOnlySequence<byte> Inbox = new("_INBOX.2bd806c97f0e00af1a1fc332.ltf3a9c2d1.c17"u8.ToArray());

    private readonly Permissions _caller = new(["bench.>"], ["bench.>"], [], [], "_INBOX.2bd806c97f0e00af1a1fc332");
    private readonly Permissions _responder = new(["bench.>"], ["bench.>"], [], [], "_INBOX.9c1185a5c5e9fc54612808977");
    private readonly ReplyPermits _permits = new(1, TimeSpan.FromMinutes(2), 1024, TimeProvider.System);

    [Benchmark(Baseline = true)]
    public bool AllowAllCall() => Permissions.AllowAll.IsAllowAll && Permissions.AllowAll.IsAllowAll;

    [Benchmark]
    public bool RestrictedCall()
    {
        Span<char> stack = stackalloc char[TopicChars.StackLength];
        bool ok;
        using (var topic = new TopicChars(RequestTopic, stack))
        {
            ok = _caller.CanPublish(topic.Span);
        }

        using (var replyTo = new TopicChars(Inbox, stack))
        {
            ok &= _caller.CanReceive(replyTo.Span);
        }

        _permits.Grant(Inbox);
        using (var reply = new TopicChars(Inbox, stack))
        {
            ok &= !_responder.CanPublish(reply.Span) && _permits.TryUse(reply.Span);
        }

        return ok;
    }
}
