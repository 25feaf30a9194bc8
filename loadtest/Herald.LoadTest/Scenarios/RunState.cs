namespace Herald.LoadTest.Scenarios;

/// <summary>
/// Whether the scenario itself is closing its connections: from then on a failed receive or send is the
/// expected end of a connection, not a disconnection by the broker. Thread-safe.
/// </summary>
internal sealed class RunState
{
    private volatile bool _stopping;

    public bool Stopping => _stopping;

    public void BeginStopping() => _stopping = true;

    /// <summary>Waits for a connection's task to end, at most <paramref name="timeout"/>, ignoring how it ended.</summary>
    public static async Task WaitQuietlyAsync(Task task, TimeSpan timeout)
    {
        try
        {
            await task.WaitAsync(timeout);
        }
        catch (Exception e) when (IsConnectionEnd(e) || e is TimeoutException)
        {
            // closed under it, or still blocked: the sockets are closed next either way
        }
    }

    public static void CloseAll(IEnumerable<Client.HeraldConnection> connections, Client.HeraldConnection? other = null)
    {
        foreach (Client.HeraldConnection connection in connections)
        {
            connection.Close();
        }

        other?.Close();
    }

    /// <summary>The ways a connection's task ends when its socket closes under it.</summary>
    public static bool IsConnectionEnd(Exception e) =>
        e is System.Net.Sockets.SocketException or ObjectDisposedException or IOException or OperationCanceledException;

    /// <summary>The ways connecting and subscribing fail when the broker is not there or not well.</summary>
    public static bool IsSetupFailure(Exception e) =>
        IsConnectionEnd(e) || e is Client.BrokerErrorException or Herald.Protocol.ProtocolException or TimeoutException
            or System.Net.Http.HttpRequestException or System.Net.WebSockets.WebSocketException or Client.LongPollException
            or StackExchange.Redis.RedisException;
}
