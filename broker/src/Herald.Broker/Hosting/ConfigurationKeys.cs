using System.Collections;
using System.Reflection;
using Microsoft.Extensions.Configuration;

namespace Herald.Broker.Hosting;

/// <summary>A key under <c>Herald:</c> that no option binds, and the known key it most likely meant (or null).</summary>
internal readonly record struct UnknownKey(string Path, string? Closest);

/// <summary>
/// Finds the keys of the <c>Herald</c> section that the configuration binder would silently ignore (a typo
/// such as <c>Herald:Limits:MaxFrameByte</c>). The valid keys are read from the options types themselves, by
/// reflection, as the binder reads them: public settable properties (and get-only ones holding an object),
/// every item of a list or array, every entry of a dictionary. Runs once at start, never again.
/// </summary>
internal static class ConfigurationKeys
{
    /// <summary>The keys under <paramref name="section"/> that <typeparamref name="T"/> does not bind, in configuration order.</summary>
    public static IReadOnlyList<UnknownKey> Unknown<T>(IConfigurationSection section)
    {
        var unknown = new List<UnknownKey>();
        Walk(section, typeof(T), unknown);
        return unknown;
    }

    /// <summary>
    /// Every setting <typeparamref name="T"/> binds, as a path below <paramref name="prefix"/>: each value, and each
    /// list or dictionary as one setting (its items are not expanded). What the README's configuration table lists.
    /// </summary>
    public static IEnumerable<string> Settings<T>(string prefix) => Settings(typeof(T), prefix);

    private static IEnumerable<string> Settings(Type type, string prefix)
    {
        foreach ((string key, PropertyInfo property) in Properties(type))
        {
            Type value = Nullable.GetUnderlyingType(property.PropertyType) ?? property.PropertyType;
            if (IsScalar(value) || ItemType(value) is not null)
            {
                yield return prefix + ":" + key;
            }
            else
            {
                foreach (string setting in Settings(value, prefix + ":" + key))
                {
                    yield return setting;
                }
            }
        }
    }

    private static void Walk(IConfigurationSection section, Type type, List<UnknownKey> unknown)
    {
        type = Nullable.GetUnderlyingType(type) ?? type;
        if (IsScalar(type))
        {
            foreach (IConfigurationSection child in section.GetChildren())
            {
                unknown.Add(new UnknownKey(child.Path, null)); // a value has no keys below it
            }

            return;
        }

        if (ItemType(type) is { } item)
        {
            foreach (IConfigurationSection child in section.GetChildren())
            {
                Walk(child, item, unknown); // Tokens:0, AllowedDomains:1, or a dictionary's own key
            }

            return;
        }

        Dictionary<string, PropertyInfo> properties = Properties(type);
        foreach (IConfigurationSection child in section.GetChildren())
        {
            if (properties.TryGetValue(child.Key, out PropertyInfo? property))
            {
                Walk(child, property.PropertyType, unknown);
            }
            else
            {
                unknown.Add(new UnknownKey(child.Path, Closest(section.Path, child.Key, properties.Values)));
            }
        }
    }

    /// <summary>What the binder binds on <paramref name="type"/>, by key, ignoring case as the binder does.</summary>
    private static Dictionary<string, PropertyInfo> Properties(Type type)
    {
        var properties = new Dictionary<string, PropertyInfo>(StringComparer.OrdinalIgnoreCase);
        foreach (PropertyInfo property in type.GetProperties(BindingFlags.Public | BindingFlags.Instance))
        {
            if (property.GetIndexParameters().Length == 0 && (property.SetMethod is { IsPublic: true } || !IsScalar(property.PropertyType)))
            {
                string key = property.GetCustomAttribute<ConfigurationKeyNameAttribute>()?.Name ?? property.Name;
                properties.TryAdd(key, property);
            }
        }

        return properties;
    }

    private static bool IsScalar(Type type)
    {
        type = Nullable.GetUnderlyingType(type) ?? type;
        return type.IsPrimitive || type.IsEnum || type == typeof(string) || type == typeof(decimal) || type == typeof(TimeSpan)
            || type == typeof(DateTime) || type == typeof(DateTimeOffset) || type == typeof(Guid) || type == typeof(Uri);
    }

    /// <summary>The element type of an array, list or set, or the value type of a dictionary; null for anything else.</summary>
    private static Type? ItemType(Type type)
    {
        if (type.IsArray)
        {
            return type.GetElementType();
        }

        if (!typeof(IEnumerable).IsAssignableFrom(type))
        {
            return null;
        }

        foreach (Type candidate in type.GetInterfaces().Prepend(type).Where(t => t.IsGenericType))
        {
            Type definition = candidate.GetGenericTypeDefinition();
            if (definition == typeof(IDictionary<,>) || definition == typeof(IReadOnlyDictionary<,>))
            {
                return candidate.GetGenericArguments()[1];
            }
        }

        return type.GetInterfaces().Prepend(type).FirstOrDefault(t => t.IsGenericType && t.GetGenericTypeDefinition() == typeof(IEnumerable<>))?.GetGenericArguments()[0];
    }

    /// <summary>The known key nearest to <paramref name="key"/> (edit distance, ignoring case), if near enough to be a typo of it.</summary>
    private static string? Closest(string parent, string key, IEnumerable<PropertyInfo> known)
    {
        string? best = null;
        int bestDistance = int.MaxValue;
        foreach (PropertyInfo property in known)
        {
            string name = property.GetCustomAttribute<ConfigurationKeyNameAttribute>()?.Name ?? property.Name;
            int distance = Distance(key.ToUpperInvariant(), name.ToUpperInvariant());
            if (distance < bestDistance)
            {
                (best, bestDistance) = (name, distance);
            }
        }

        return best is not null && bestDistance <= Math.Max(2, best.Length / 3) ? parent + ":" + best : null;
    }

    /// <summary>Levenshtein distance (start-up only: two rows, small strings).</summary>
    private static int Distance(string a, string b)
    {
        int[] previous = new int[b.Length + 1];
        int[] current = new int[b.Length + 1];
        for (int j = 0; j <= b.Length; j++)
        {
            previous[j] = j;
        }

        for (int i = 1; i <= a.Length; i++)
        {
            current[0] = i;
            for (int j = 1; j <= b.Length; j++)
            {
                int substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
                current[j] = Math.Min(substitution, Math.Min(previous[j], current[j - 1]) + 1);
            }

            (previous, current) = (current, previous);
        }

        return previous[b.Length];
    }
}
