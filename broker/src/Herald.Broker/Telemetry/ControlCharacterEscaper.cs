using System.Globalization;
using System.Text;
using Serilog.Core;
using Serilog.Events;

namespace Herald.Broker.Telemetry;

/// <summary>
/// Escapes control characters in every property value of every log event, before the text sink writes
/// it: a client name, topic, reason or user agent with a newline (or a carriage return, or an ANSI escape)
/// then prints as <c>\n</c> (<c>\r</c>, <c>\u001B</c>) inside its own line and cannot forge another line.
/// Once at the source for every logger (the broker's and ASP.NET Core's), so no call site has to remember.
/// Strings, and the text of other values that print through <c>ToString</c>, are checked; numbers, enums,
/// times and the like cannot carry control characters and are passed as they are. Nothing is allocated for a
/// value that needs no escaping; logs are never written per message, so this is not on the hot path.
/// The JSON format needs none of it: JSON escapes control characters and keeps the value exact.
/// </summary>
internal sealed class ControlCharacterEscaper : ILogEventEnricher
{
    public void Enrich(LogEvent logEvent, ILogEventPropertyFactory propertyFactory)
    {
        List<LogEventProperty>? escaped = null;
        foreach (KeyValuePair<string, LogEventPropertyValue> property in logEvent.Properties)
        {
            LogEventPropertyValue value = Escape(property.Value);
            if (!ReferenceEquals(value, property.Value))
            {
                (escaped ??= []).Add(new LogEventProperty(property.Key, value));
            }
        }

        foreach (LogEventProperty property in escaped ?? [])
        {
            logEvent.AddOrUpdateProperty(property);
        }
    }

    /// <summary>The same value, or a copy with every control character escaped.</summary>
    internal static LogEventPropertyValue Escape(LogEventPropertyValue value)
    {
        switch (value)
        {
            case ScalarValue { Value: string text }:
                return NeedsEscaping(text) ? new ScalarValue(EscapeText(text)) : value;
            case ScalarValue { Value: null or ValueType }:
                return value; // numbers, booleans, enums, times: no characters of their own
            case ScalarValue scalar:
                string? shown = scalar.Value.ToString();
                return shown is not null && NeedsEscaping(shown) ? new ScalarValue(EscapeText(shown)) : value;
            case SequenceValue sequence:
                LogEventPropertyValue[] elements = sequence.Elements.Select(Escape).ToArray();
                return elements.Where((e, i) => !ReferenceEquals(e, sequence.Elements[i])).Any() ? new SequenceValue(elements) : value;
            case StructureValue structure:
                LogEventProperty[] properties = structure.Properties.Select(p => new LogEventProperty(p.Name, Escape(p.Value))).ToArray();
                return properties.Where((p, i) => !ReferenceEquals(p.Value, structure.Properties[i].Value)).Any() ? new StructureValue(properties, structure.TypeTag) : value;
            case DictionaryValue dictionary:
                KeyValuePair<ScalarValue, LogEventPropertyValue>[] entries = dictionary.Elements
                    .Select(e => new KeyValuePair<ScalarValue, LogEventPropertyValue>((ScalarValue)Escape(e.Key), Escape(e.Value))).ToArray();
                return entries.Zip(dictionary.Elements).Any(p => !ReferenceEquals(p.First.Key, p.Second.Key) || !ReferenceEquals(p.First.Value, p.Second.Value)) ? new DictionaryValue(entries) : value;
            default:
                return value;
        }
    }

    /// <summary>C0 and C1 controls (newline, carriage return, escape, NEL, ...), and the Unicode line and paragraph separators.</summary>
    private static bool IsEscaped(char c) => char.IsControl(c) || c is '\u2028' or '\u2029';

    private static bool NeedsEscaping(string text)
    {
        foreach (char c in text)
        {
            if (IsEscaped(c))
            {
                return true;
            }
        }

        return false;
    }

    private static string EscapeText(string text)
    {
        var escaped = new StringBuilder(text.Length + 8);
        foreach (char c in text)
        {
            _ = c switch
            {
                '\n' => escaped.Append("\\n"),
                '\r' => escaped.Append("\\r"),
                '\t' => escaped.Append("\\t"),
                _ when IsEscaped(c) => escaped.Append("\\u").Append(((int)c).ToString("X4", CultureInfo.InvariantCulture)),
                _ => escaped.Append(c),
            };
        }

        return escaped.ToString();
    }
}
