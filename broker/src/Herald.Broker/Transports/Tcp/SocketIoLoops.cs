namespace Herald.Broker.Transports.Tcp;

/// <summary>
/// Sets how .NET's socket layer runs completions (<see cref="TcpOptions.IoLoops"/>): with inline completions each
/// of its event threads runs the continuation of the receive or send it polled (Kestrel's transport loop, and with
/// inline scheduling the session's read loop and the one-receiver drain) on itself, so a message costs the one
/// wake-up of the thread that polled its socket instead of that and a pool worker's. The socket layer reads these
/// two variables once, when its first socket starts polling: set before any socket exists, else they do nothing.
/// </summary>
internal static class SocketIoLoops
{
    private const string InlineCompletions = "DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS";
    private const string ThreadCount = "DOTNET_SYSTEM_NET_SOCKETS_THREAD_COUNT";

    /// <summary><paramref name="loops"/> event threads running completions inline; 0 leaves .NET's defaults (and what the environment says).</summary>
    public static void Use(int loops)
    {
        if (loops <= 0)
        {
            return;
        }

        Environment.SetEnvironmentVariable(InlineCompletions, "1");
        Environment.SetEnvironmentVariable(ThreadCount, loops.ToString(System.Globalization.CultureInfo.InvariantCulture));
    }
}
