using System.Buffers;
using System.IO.Pipelines;
using Herald.Broker.Telemetry;
using Microsoft.AspNetCore.Connections;

namespace Herald.Broker.Policy;

/// <summary>
/// The socket-policy responder (protocol-spec/longpoll.md §4): reads at most 23 bytes within the
/// timeout, answers a Silverlight or Flash policy request with one write and closes; anything else is
/// closed unanswered. Each connection costs one small read; past the concurrency cap it is closed at once.
/// </summary>
internal sealed class SocketPolicyHandler : ConnectionHandler
{
    private static readonly byte[] Request = "<policy-file-request/>"u8.ToArray(); // 22 bytes

    private readonly PolicyDocuments _documents;
    private readonly PolicyOptions _options;
    private readonly BrokerMetrics _metrics;
    private int _active;

    public SocketPolicyHandler(PolicyDocuments documents, PolicyOptions options, BrokerMetrics metrics)
    {
        _documents = documents;
        _options = options;
        _metrics = metrics;
    }

    public override async Task OnConnectedAsync(ConnectionContext connection)
    {
        try
        {
            if (Interlocked.Increment(ref _active) > _options.MaxConcurrentRequests)
            {
                _metrics.PolicyRequest("busy");
                return;
            }

            byte[]? answer = await ReadRequestAsync(connection.Transport.Input).ConfigureAwait(false);
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
            Interlocked.Decrement(ref _active);
        }
    }

    private async Task<byte[]?> ReadRequestAsync(PipeReader input)
    {
        using var timeout = new CancellationTokenSource(_options.Timeout);
        while (true)
        {
            ReadResult result;
            try
            {
                result = await input.ReadAsync(timeout.Token).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                _metrics.PolicyRequest("timeout");
                return null;
            }

            ReadOnlySequence<byte> buffer = result.Buffer;
            byte[]? answer = Classify(buffer, out bool refuse);
            input.AdvanceTo(buffer.Start, buffer.End);
            if (answer is not null || refuse || result.IsCompleted)
            {
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
}
