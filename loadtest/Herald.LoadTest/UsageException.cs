namespace Herald.LoadTest;

/// <summary>The command line is wrong in a way only the command can tell (options that do not go together, a
/// target that cannot serve them); the message says how. Exit code 2, as a parse error.</summary>
internal sealed class UsageException : Exception
{
    public UsageException() { }

    public UsageException(string message) : base(message) { }

    public UsageException(string message, Exception inner) : base(message, inner) { }
}
