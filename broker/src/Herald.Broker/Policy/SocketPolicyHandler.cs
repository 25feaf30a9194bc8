using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using Herald.Broker.Telemetry;
using Microsoft.AspNetCore.Connections;

namespace Herald.Broker.Policy;

/// <summary>
/// The socket-policy responder (protocol-spec/longpoll.md §4): reads at most 23 bytes within the
/// timeout, answers a Silverlight or Flash policy request with one write and closes; anything else is
/// closed unanswered. Each connection costs one small read.
/// </summary>
/// <remarks>
/// Idle sockets are shed first: a connection that has not yet sent its whole request is <em>waiting</em>,
/// and waiting connections are kept in arrival order, overall and per remote address. A new connection
/// from an address that already has <see cref="PolicyOptions.MaxConnectionsPerAddress"/> waiting takes the
/// place of that address's oldest; at <see cref="PolicyOptions.MaxConcurrentRequests"/> it takes the place
/// of the oldest waiting connection of any address. So a thousand idle sockets cannot keep a real client,
/// which sends its 22 bytes at once, from being answered. Only when every connection has sent its request
/// (and is being answered) is the new one closed at once (<c>busy</c>). A shed connection's read is
/// cancelled and it is closed unanswered (<c>shed</c>). <c>_gate</c> guards the lists and counts; it is
/// taken twice per connection, never per byte.
/// </remarks>
internal sealed class SocketPolicyHandler : ConnectionHandler
{
    private static readonly byte[] Request = "<policy-file-request/>"u8.ToArray(); // 22 bytes

    private readonly PolicyDocuments _documents;
    private readonly PolicyOptions _options;
    private readonly BrokerMetrics _metrics;
    private readonly Lock _gate = new();
    private readonly LinkedList<Waiting> _waiting = new();                         // oldest first
    private readonly Dictionary<IPAddress, LinkedList<Waiting>> _waitingByAddress = []; // oldest first; no empty lists
    private int _active; // waiting and being answered

    public SocketPolicyHandler(PolicyDocuments documents, PolicyOptions options, BrokerMetrics metrics)
    {
        _documents = documents;
        _options = options;
        _metrics = metrics;
    }

    public override async Task OnConnectedAsync(ConnectionContext connection)
    {
        IPAddress address = connection.RemoteEndPoint is IPEndPoint remote
            ? (remote.Address.IsIPv4MappedToIPv6 ? remote.Address.MapToIPv4() : remote.Address)
            : IPAddress.None;
        var self = new Waiting(address);
        if (!Admit(self))
        {
            _metrics.PolicyRequest("busy");
            return;
        }

        try
        {
            byte[]? answer = await ReadRequestAsync(connection.Transport.Input, self).ConfigureAwait(false);
            if (answer is null)
            {
                return;
            }

            await connection.Transport.Output.WriteAsync(answer).ConfigureAwait(false);
            await connection.Transport.Output.CompleteAsync().ConfigureAwait(false);
        }
        catch (Exception e) when (e is IOException or ConnectionResetException or ConnectionAbortedException or OperationCanceledException)
        {
            _metrics.PolicyRequest("aborted");
        }
        finally
        {
            Release(self);
        }
    }

    /// <summary>Takes a slot for <paramref name="self"/>, shedding the oldest waiting connection (of its address first) to make room; false when there is none to shed.</summary>
    private bool Admit(Waiting self)
    {
        Waiting? shed = null;
        lock (_gate)
        {
            if (_waitingByAddress.TryGetValue(self.Address, out LinkedList<Waiting>? ofAddress) && ofAddress.Count >= _options.MaxConnectionsPerAddress)
            {
                shed = ofAddress.First!.Value;
            }
            else if (_active >= _options.MaxConcurrentRequests)
            {
                shed = _waiting.First?.Value;
                if (shed is null)
                {
                    return false; // every connection is being answered: none is idle
                }
            }

            if (shed is not null)
            {
                StopWaiting(shed);
                _active--; // its slot is self's now; its own Release finds it released
                shed.Released = true;
            }

            self.InAll = _waiting.AddLast(self);
            if (ofAddress is null)
            {
                ofAddress = new LinkedList<Waiting>();
                _waitingByAddress.Add(self.Address, ofAddress);
            }

            self.InAddress = ofAddress.AddLast(self);
            _active++;
        }

        shed?.Shed.Cancel(); // outside the lock: runs the shed read's continuation
        return true;
    }

    /// <summary>The request is complete (or refused): the connection is no longer idle, so never shed.</summary>
    private void StoppedWaiting(Waiting self)
    {
        lock (_gate)
        {
            StopWaiting(self);
        }
    }

    private void Release(Waiting self)
    {
        lock (_gate)
        {
            if (!self.Released)
            {
                StopWaiting(self);
                _active--;
                self.Released = true;
            }
        }
    }

    // Caller holds _gate.
    private void StopWaiting(Waiting waiting)
    {
        if (waiting.InAll is { } all)
        {
            _waiting.Remove(all);
            waiting.InAll = null;
        }

        if (waiting.InAddress is { } node)
        {
            LinkedList<Waiting> ofAddress = node.List!;
            ofAddress.Remove(node);
            waiting.InAddress = null;
            if (ofAddress.Count == 0)
            {
                _waitingByAddress.Remove(waiting.Address);
            }
        }
    }

    private async Task<byte[]?> ReadRequestAsync(PipeReader input, Waiting self)
    {
        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(self.Shed.Token);
        timeout.CancelAfter(_options.Timeout);
        while (true)
        {
            ReadResult result;
            try
            {
                result = await input.ReadAsync(timeout.Token).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                _metrics.PolicyRequest(self.Shed.IsCancellationRequested ? "shed" : "timeout");
                return null;
            }

            ReadOnlySequence<byte> buffer = result.Buffer;
            byte[]? answer = Classify(buffer, out bool refuse);
            input.AdvanceTo(buffer.Start, buffer.End);
            if (answer is not null || refuse || result.IsCompleted)
            {
                StoppedWaiting(self);
                _metrics.PolicyRequest(answer == _documents.SocketClientAccessPolicy ? "silverlight" : answer is not null ? "flash" : "refused");
                return answer;
            }
        }
    }

    /// <summary>Silverlight sends exactly the 22 request bytes; Flash sends them and a NUL. Anything else is refused.</summary>
    private byte[]? Classify(in ReadOnlySequence<byte> buffer, out bool refuse)
    {
        Span<byte> head = stackalloc byte[Request.Length + 1];
        int length = (int)Math.Min(buffer.Length, head.Length);
        buffer.Slice(0, length).CopyTo(head);
        refuse = buffer.Length > Request.Length + 1 || !head[..Math.Min(length, Request.Length)].SequenceEqual(Request.AsSpan(0, Math.Min(length, Request.Length)));
        if (refuse || buffer.Length < Request.Length)
        {
            return null;
        }

        if (buffer.Length == Request.Length)
        {
            return _documents.SocketClientAccessPolicy;
        }

        refuse = head[Request.Length] != 0;
        return refuse ? null : _documents.SocketCrossDomainPolicy;
    }

    /// <summary>One policy connection; its list nodes and <see cref="Released"/> are guarded by <c>_gate</c>.</summary>
    private sealed class Waiting(IPAddress address)
    {
        public IPAddress Address { get; } = address;

        /// <summary>Cancelled when a newer connection takes this one's place. Never disposed: it has no timer, and a late Cancel must not throw.</summary>
        public CancellationTokenSource Shed { get; } = new();

        public LinkedListNode<Waiting>? InAll { get; set; }

        public LinkedListNode<Waiting>? InAddress { get; set; }

        public bool Released { get; set; }
    }
}
