using System.CommandLine;
using System.Globalization;
using System.Text;
using Herald.Cli.Output;
using Herald.Client;

namespace Herald.Cli.Commands;

/// <summary>The options and arguments several commands share: payload, <c>--count</c>, <c>--header</c>, <c>--output</c>.</summary>
internal static class MessageOptions
{
    public static Argument<string?> Payload(string what) => new("payload")
    {
        Description = $"The {what} as UTF-8 text; without it, stdin's bytes as they are",
        Arity = ArgumentArity.ZeroOrOne,
    };

    public static Option<int> Count(string description, int defaultValue)
    {
        var option = new Option<int>("--count", "-c") { Description = description, DefaultValueFactory = _ => defaultValue, HelpName = "n" };
        option.Validators.Add(result =>
        {
            if (result.GetValueOrDefault<int>() < 0)
            {
                result.AddError("--count must be 0 or more.");
            }
        });
        return option;
    }

    public static Option<string[]> Headers() => new("--header", "-H")
    {
        Description = "A header Key=Value (repeatable; the same key again adds a value)",
        HelpName = "key=value",
        AllowMultipleArgumentsPerToken = false,
    };

    public static Option<MessageFormat> Output() => new("--output", "-o")
    {
        Description = "text: topic, size, compression, headers, payload; json: one object a line; raw: payload bytes only",
        DefaultValueFactory = _ => MessageFormat.Text,
    };

    public static Option<string?> Queue() => new("--queue", "-q")
    {
        Description = "Join this queue group: each message goes to one member of the group",
        HelpName = "group",
    };

    /// <summary>The headers of <c>--header</c>s, split at the first <c>=</c> (a value may be empty or hold <c>=</c>).</summary>
    public static HeraldHeaders ParseHeaders(string[]? values)
    {
        HeraldHeaders headers = HeraldHeaders.Empty;
        foreach (string value in values ?? [])
        {
            int equals = value.IndexOf('=', StringComparison.Ordinal);
            if (equals <= 0)
            {
                throw new CliException(ExitCodes.Usage, $"--header '{value}' is not Key=Value");
            }

            try
            {
                headers = headers.Add(value[..equals], value[(equals + 1)..]);
            }
            catch (ArgumentException e)
            {
                throw new CliException(ExitCodes.Usage, $"--header '{value}': {e.Message}");
            }
        }

        return headers;
    }

    /// <summary>The payload argument, or all of stdin when there is none (with a hint when stdin is a terminal).</summary>
    public static async Task<byte[]?> ReadStdinUnlessGivenAsync(string? argument, CancellationToken cancellationToken)
    {
        if (argument is not null)
        {
            return null;
        }

        if (!Console.IsInputRedirected)
        {
            CommandRun.Notice("herald: reading the payload from stdin; end it with Ctrl+D");
        }

        await using Stream stdin = Console.OpenStandardInput();
        using var buffer = new MemoryStream();
        await stdin.CopyToAsync(buffer, cancellationToken);
        return buffer.ToArray();
    }

    /// <summary>The payload argument with <c>{{Count}}</c> (from 1) and <c>{{Time}}</c> (UTC, ISO 8601) filled in.</summary>
    public static byte[] Expand(string template, int count) =>
        Encoding.UTF8.GetBytes(template
            .Replace("{{Count}}", count.ToString(CultureInfo.InvariantCulture), StringComparison.Ordinal)
            .Replace("{{Time}}", DateTimeOffset.UtcNow.ToString("O", CultureInfo.InvariantCulture), StringComparison.Ordinal));
}
