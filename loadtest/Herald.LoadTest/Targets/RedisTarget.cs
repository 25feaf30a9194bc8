namespace Herald.LoadTest.Targets;

/// <summary>Placeholder until the Redis adapter lands.</summary>
internal static class RedisTarget
{
    public static Task<ITarget> StartAsync(TargetOptions options, CancellationToken cancellationToken) =>
        throw new TargetUnavailableException($"target {options.Target} is not implemented yet");
}
