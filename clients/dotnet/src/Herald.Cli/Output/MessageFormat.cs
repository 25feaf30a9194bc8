namespace Herald.Cli.Output;

/// <summary>How <c>sub</c> and <c>req</c> print a message (<c>--output</c>).</summary>
internal enum MessageFormat
{
    /// <summary>For people: a line with the topic, size and compression, the headers, then the payload as text.</summary>
    Text,

    /// <summary>For programs: one JSON object a line (topic, reply_to, size, compressed, headers, payload).</summary>
    Json,

    /// <summary>For pipes: the payload's bytes and nothing else.</summary>
    Raw,
}
