namespace Herald.LoadTest.Targets;

/// <summary>Placeholder until the Herald adapter lands.</summary>
internal static class HeraldTarget
{
    public static Task<ITarget> StartAsync(TargetOptions options, CancellationToken cancellationToken) =>
        throw new TargetUnavailableException($"target {options.Target} is not implemented yet");
}
