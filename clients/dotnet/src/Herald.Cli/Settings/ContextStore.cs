using System.Text.Json;
using System.Text.RegularExpressions;

namespace Herald.Cli.Settings;

/// <summary>
/// The contexts on disk: <c>$XDG_CONFIG_HOME/herald/context/NAME.json</c> (else <c>~/.config/herald/...</c>), and
/// the selected one's name in <c>herald/context.txt</c>, as <c>nats</c> keeps its own. The folder is created
/// 0700 and every context file is written 0600 (it may hold a token), by a rename, so a reader never sees
/// half a file and a file that was readable before is replaced by one that is not.
/// </summary>
internal sealed partial class ContextStore
{
    private const UnixFileMode OwnerOnly = UnixFileMode.UserRead | UnixFileMode.UserWrite;

    public ContextStore(string configHome)
    {
        Root = Path.Combine(configHome, "herald");
        Folder = Path.Combine(Root, "context");
    }

    public string Root { get; }

    public string Folder { get; }

    private string SelectedFile => Path.Combine(Root, "context.txt");

    /// <summary>The store of this user: <c>$XDG_CONFIG_HOME</c>, else <c>~/.config</c>.</summary>
    public static ContextStore ForUser()
    {
        string? xdg = Environment.GetEnvironmentVariable("XDG_CONFIG_HOME");
        string home = !string.IsNullOrEmpty(xdg) ? xdg : Path.Combine(Environment.GetFolderPath(Environment.SpecialFolder.UserProfile), ".config");
        return new ContextStore(home);
    }

    public string PathOf(string name) => Path.Combine(Folder, CheckName(name) + ".json");

    public bool Exists(string name) => File.Exists(PathOf(name));

    public IReadOnlyList<string> Names() =>
        Directory.Exists(Folder)
            ? [.. Directory.EnumerateFiles(Folder, "*.json").Select(Path.GetFileNameWithoutExtension).OfType<string>().Where(n => ValidName().IsMatch(n)).Order(StringComparer.Ordinal)]
            : [];

    /// <summary>The context named <paramref name="name"/>; a missing or malformed file is a <see cref="CliException"/> that names it.</summary>
    public HeraldContext Load(string name, TextWriter? warnings = null)
    {
        string path = PathOf(name);
        if (!File.Exists(path))
        {
            throw new CliException(ExitCodes.Failure, $"no context named '{name}' ({path}); 'herald context ls' lists them");
        }

        HeraldContext? context;
        try
        {
            context = JsonSerializer.Deserialize(File.ReadAllText(path), ContextJson.Default.HeraldContext);
        }
        catch (JsonException e)
        {
            throw new CliException(ExitCodes.Failure, $"context '{name}' ({path}) is not valid: {e.Message}");
        }

        if (context is null)
        {
            throw new CliException(ExitCodes.Failure, $"context '{name}' ({path}) is not valid: it holds null, not an object");
        }

        if (warnings is not null && !OperatingSystem.IsWindows() && (context.Token ?? context.MonitorToken) is not null)
        {
            UnixFileMode mode = File.GetUnixFileMode(path);
            if ((mode & ~(UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute)) != 0)
            {
                warnings.WriteLine($"herald: warning: context '{name}' holds a token but {path} is readable by others; 'chmod 600 {path}'");
            }
        }

        return context;
    }

    public void Save(string name, HeraldContext context)
    {
        string path = PathOf(name);
        CreateFolder();
        WriteOwnerOnly(path, JsonSerializer.Serialize(context, ContextJson.Default.HeraldContext) + "\n");
    }

    public bool Remove(string name)
    {
        string path = PathOf(name);
        if (!File.Exists(path))
        {
            return false;
        }

        File.Delete(path);
        if (Selected == name)
        {
            File.Delete(SelectedFile);
        }

        return true;
    }

    /// <summary>The selected context's name, or null when none is.</summary>
    public string? Selected
    {
        get
        {
            string? name = File.Exists(SelectedFile) ? File.ReadAllText(SelectedFile).Trim() : null;
            return string.IsNullOrEmpty(name) ? null : name;
        }
    }

    public void Select(string name)
    {
        CheckName(name);
        CreateFolder();
        WriteOwnerOnly(SelectedFile, name + "\n");
    }

    /// <summary>A name is a file name and nothing more: no path, no dot file.</summary>
    public static string CheckName(string name) =>
        ValidName().IsMatch(name) ? name
        : throw new CliException(ExitCodes.Usage, $"'{name}' is not a context name: use letters, digits, '_', '-' and '.', starting with a letter or digit (at most 64)");

    private void CreateFolder()
    {
        if (OperatingSystem.IsWindows())
        {
            Directory.CreateDirectory(Folder);
        }
        else
        {
            Directory.CreateDirectory(Folder, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute);
        }
    }

    private static void WriteOwnerOnly(string path, string text)
    {
        string temporary = path + "." + Environment.ProcessId + ".tmp";
        var options = new FileStreamOptions { Mode = FileMode.CreateNew, Access = FileAccess.Write };
        if (!OperatingSystem.IsWindows())
        {
            options.UnixCreateMode = OwnerOnly;
        }

        try
        {
            using (var stream = new FileStream(temporary, options))
            using (var writer = new StreamWriter(stream))
            {
                writer.Write(text);
            }

            File.Move(temporary, path, overwrite: true);
        }
        finally
        {
            File.Delete(temporary);
        }
    }

    [GeneratedRegex("^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    private static partial Regex ValidName();
}
