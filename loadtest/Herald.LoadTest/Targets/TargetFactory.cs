namespace Herald.LoadTest.Targets;

/// <summary>Starts (or finds) the target named by <see cref="TargetOptions"/>.</summary>
internal static class TargetFactory
{
    /// <summary>
    /// Starts the server if the options say so, waits until it answers, and returns the target.
    /// Pins this tool to <c>--client-cpus</c> first when given.
    /// </summary>
    /// <exception cref="TargetUnavailableException">The server could not be started or reached; the message says how to get it.</exception>
    public static async Task<ITarget> StartAsync(TargetOptions options, CancellationToken cancellationToken)
    {
        ClientAffinity.Apply(options.ClientCpus);
        return options.Target switch
        {
            "herald" => await HeraldTarget.StartAsync(options, cancellationToken),
            "nats" => await NatsTarget.StartAsync(options, cancellationToken),
            "redis" => await RedisTarget.StartAsync(options, cancellationToken),
            "signalr" => await SignalRTarget.StartAsync(options, cancellationToken),
            "cluster" => await ClusterTarget.StartAsync(options, cancellationToken),
            _ => throw new TargetUnavailableException($"Unknown target '{options.Target}'."),
        };
    }
}

/// <summary>The target could not be started or reached (not installed, port taken, not answering). Exit code 3.</summary>
internal sealed class TargetUnavailableException : Exception
{
    public TargetUnavailableException() { }

    public TargetUnavailableException(string message) : base(message) { }

    public TargetUnavailableException(string message, Exception inner) : base(message, inner) { }
}
