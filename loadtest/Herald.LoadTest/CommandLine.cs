using System.Globalization;

namespace Herald.LoadTest;

/// <summary>
/// The options after the subcommand: <c>--name value</c>, <c>--name=value</c>, or a bare <c>--flag</c>.
/// A scenario reads the options it knows, then calls <see cref="RejectUnused"/> so a typo fails loudly
/// instead of silently running with a default.
/// </summary>
internal sealed class CommandLine
{
    private readonly Dictionary<string, string?> _values = new(StringComparer.Ordinal);
    private readonly HashSet<string> _used = new(StringComparer.Ordinal);

    private CommandLine() { }

    /// <exception cref="UsageException">A token is not an option, or an option is given twice.</exception>
    public static CommandLine Parse(IReadOnlyList<string> args)
    {
        var options = new CommandLine();
        for (int i = 0; i < args.Count; i++)
        {
            string token = args[i];
            if (!token.StartsWith("--", StringComparison.Ordinal) || token.Length == 2)
            {
                throw new UsageException($"Unexpected argument '{token}': options look like --name value.");
            }

            string name;
            string? value;
            int equals = token.IndexOf('=', StringComparison.Ordinal);
            if (equals > 0)
            {
                name = token[2..equals];
                value = token[(equals + 1)..];
            }
            else
            {
                name = token[2..];
                value = i + 1 < args.Count && !args[i + 1].StartsWith("--", StringComparison.Ordinal) ? args[++i] : null;
            }

            if (!options._values.TryAdd(name, value))
            {
                throw new UsageException($"Option --{name} is given twice.");
            }
        }

        return options;
    }

    public bool Has(string name)
    {
        _used.Add(name);
        return _values.ContainsKey(name);
    }

    public bool Flag(string name)
    {
        if (!Has(name))
        {
            return false;
        }

        return _values[name] switch
        {
            null or "true" => true,
            "false" => false,
            string other => throw new UsageException($"--{name} is a flag; '{other}' is not true or false."),
        };
    }

    public string String(string name, string defaultValue) => Value(name) ?? defaultValue;

    public string? OptionalString(string name) => Value(name);

    public int Int(string name, int defaultValue, int min = 0, int max = int.MaxValue)
    {
        string? text = Value(name);
        if (text is null)
        {
            return defaultValue;
        }

        if (!int.TryParse(text, NumberStyles.Integer, CultureInfo.InvariantCulture, out int value) || value < min || value > max)
        {
            throw new UsageException($"--{name} must be an integer from {min} to {max}, got '{text}'.");
        }

        return value;
    }

    public double Seconds(string name, double defaultValue, double min = 0, double max = 24 * 3600)
    {
        string? text = Value(name);
        if (text is null)
        {
            return defaultValue;
        }

        if (!double.TryParse(text, NumberStyles.Float, CultureInfo.InvariantCulture, out double value) || value < min || value > max)
        {
            throw new UsageException($"--{name} must be a number of seconds from {min} to {max}, got '{text}'.");
        }

        return value;
    }

    /// <exception cref="UsageException">An option was given that the scenario did not read.</exception>
    public void RejectUnused()
    {
        List<string> unknown = [.. _values.Keys.Where(k => !_used.Contains(k))];
        if (unknown.Count > 0)
        {
            throw new UsageException($"Unknown option{(unknown.Count > 1 ? "s" : "")}: {string.Join(", ", unknown.Select(u => "--" + u))}.");
        }
    }

    /// <summary>
    /// The options nothing has read yet, as command-line tokens (<c>--name value</c>, or <c>--name</c> for a
    /// bare flag), in the order given, and marks them read: for a command that passes them on to another
    /// (<c>compare</c> to its scenario).
    /// </summary>
    public List<string> TakeUnused()
    {
        List<string> tokens = [];
        foreach ((string name, string? value) in _values)
        {
            if (_used.Add(name))
            {
                tokens.Add("--" + name);
                if (value is not null)
                {
                    tokens.Add(value);
                }
            }
        }

        return tokens;
    }

    private string? Value(string name)
    {
        _used.Add(name);
        if (!_values.TryGetValue(name, out string? value))
        {
            return null;
        }

        return value ?? throw new UsageException($"--{name} needs a value.");
    }
}

/// <summary>The command line is wrong; the message says how. Exit code 2.</summary>
internal sealed class UsageException : Exception
{
    public UsageException() { }

    public UsageException(string message) : base(message) { }

    public UsageException(string message, Exception inner) : base(message, inner) { }
}
