using Herald.Protocol;

namespace Herald.LoadTest.Client;

/// <summary>The broker sent an ERROR frame (spec §4.8) where the client could not carry on.</summary>
internal sealed class BrokerErrorException : Exception
{
    public BrokerErrorException(ErrorFrame error) : base(Describe(error)) => Error = error;

    public BrokerErrorException() : base("The broker sent an ERROR frame.") { }

    public BrokerErrorException(string message) : base(message) { }

    public BrokerErrorException(string message, Exception inner) : base(message, inner) { }

    public ErrorFrame Error { get; }

    public static string Describe(ErrorFrame error) =>
        $"ERROR {error.Code} ({(uint)error.Code}, {(error.Fatal ? "fatal" : "non-fatal")}){(error.Count > 0 ? $" count={error.Count}" : "")}: {error.Message}";
}
