namespace Herald.Client.Tests.Infrastructure;

/// <summary>Hang guards: a test that would wait forever fails instead. Never a timing assertion.</summary>
public static class Wait
{
    public static readonly TimeSpan Limit = TimeSpan.FromSeconds(15);

    public static Task<T> Within<T>(this Task<T> task) => task.WaitAsync(Limit);

    public static Task Within(this Task task) => task.WaitAsync(Limit);

    public static Task<T> Within<T>(this ValueTask<T> task) => task.AsTask().WaitAsync(Limit);

    public static CancellationToken Token() => new CancellationTokenSource(Limit).Token;
}
