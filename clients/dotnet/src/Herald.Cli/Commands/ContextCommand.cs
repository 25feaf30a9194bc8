using System.CommandLine;
using System.Text;
using Herald.Cli.Settings;

namespace Herald.Cli.Commands;

/// <summary>
/// <c>herald context add|ls|select|show|rm</c>: named connection settings, as <c>nats context</c> keeps them
/// (<see cref="ContextStore"/>). <c>add</c> takes the same <c>--server</c>, <c>--token</c>, <c>--tls-ca</c>,
/// <c>--monitor</c>, <c>--monitor-token</c> flags every command takes, and stores them.
/// </summary>
internal static class ContextCommand
{
    public static Command Create(GlobalOptions globals)
    {
        var command = new Command("context", "Keep named connection settings (stored under $XDG_CONFIG_HOME/herald/context)");

        var name = new Argument<string>("name") { Description = "The context's name (letters, digits, '_', '-', '.')" };
        var description = new Option<string?>("--description") { Description = "A note shown by 'context ls'" };
        var select = new Option<bool>("--select") { Description = "Select it: commands use it when no --context is given" };
        var add = new Command("add", "Create or replace a context from --server, --token, --tls-ca, --monitor, --monitor-token") { name, description, select };
        add.SetAction((parse, ct) => CommandRun.RunAsync(() =>
        {
            ContextStore store = ContextStore.ForUser();
            string context = ContextStore.CheckName(parse.GetRequiredValue(name));
            string? tlsCa = parse.GetValue(globals.TlsCa);
            bool existed = store.Exists(context);
            store.Save(context, new HeraldContext
            {
                Description = parse.GetValue(description),
                Server = parse.GetValue(globals.Server),
                Token = parse.GetValue(globals.Token),
                TlsCa = tlsCa is null ? null : Path.GetFullPath(tlsCa),
                Monitor = parse.GetValue(globals.Monitor),
                MonitorToken = parse.GetValue(globals.MonitorToken),
            });
            Console.Out.WriteLine($"{(existed ? "Replaced" : "Created")} context '{context}' ({store.PathOf(context)})");
            if (parse.GetValue(select))
            {
                store.Select(context);
                Console.Out.WriteLine($"Selected context '{context}'");
            }

            return Task.FromResult(ExitCodes.Ok);
        }, ct));
        command.Subcommands.Add(add);

        var ls = new Command("ls", "List the contexts; '*' marks the selected one");
        ls.Aliases.Add("list");
        ls.SetAction((parse, ct) => CommandRun.RunAsync(() =>
        {
            ContextStore store = ContextStore.ForUser();
            IReadOnlyList<string> names = store.Names();
            if (names.Count == 0)
            {
                Console.Out.WriteLine("No contexts yet: 'herald context add NAME --server URL [--token T] --select' makes one.");
                return Task.FromResult(ExitCodes.Ok);
            }

            string? selected = store.Selected;
            var text = new StringBuilder();
            foreach (string context in names)
            {
                string detail;
                try
                {
                    HeraldContext loaded = store.Load(context);
                    detail = (loaded.Server ?? "(default server)") + (loaded.Description is { } d ? $"  {d}" : "");
                }
                catch (CliException e)
                {
                    detail = "(unreadable: " + e.Message + ")";
                }

                text.Append(context == selected ? "* " : "  ").Append(context.PadRight(16)).Append("  ").Append(detail).Append('\n');
            }

            Console.Out.Write(text.ToString());
            return Task.FromResult(ExitCodes.Ok);
        }, ct));
        command.Subcommands.Add(ls);

        var selectName = new Argument<string>("name") { Description = "The context to select" };
        var selectCommand = new Command("select", "Select the context commands use when no --context is given") { selectName };
        selectCommand.SetAction((parse, ct) => CommandRun.RunAsync(() =>
        {
            ContextStore store = ContextStore.ForUser();
            string context = parse.GetRequiredValue(selectName);
            store.Load(context); // exists and is readable
            store.Select(context);
            Console.Out.WriteLine($"Selected context '{context}'");
            return Task.FromResult(ExitCodes.Ok);
        }, ct));
        command.Subcommands.Add(selectCommand);

        var showName = new Argument<string?>("name") { Description = "The context to show (default: --context, HERALD_CONTEXT or the selected one)", Arity = ArgumentArity.ZeroOrOne };
        var show = new Command("show", "Show a context (tokens are never printed)") { showName };
        show.SetAction((parse, ct) => CommandRun.RunAsync(() =>
        {
            ContextStore store = ContextStore.ForUser();
            string? environment = Environment.GetEnvironmentVariable("HERALD_CONTEXT");
            string? context = parse.GetValue(showName) ?? parse.GetValue(globals.Context) ?? (string.IsNullOrEmpty(environment) ? null : environment) ?? store.Selected;
            if (context is null)
            {
                throw new CliException(ExitCodes.Failure, "no context is selected: 'herald context select NAME', or name one");
            }

            HeraldContext loaded = store.Load(context, Console.Error);
            var text = new StringBuilder();
            text.Append($"Context:        {context}{(store.Selected == context ? " (selected)" : "")}\n");
            text.Append($"File:           {store.PathOf(context)}\n");
            text.Append($"Description:    {loaded.Description ?? "-"}\n");
            text.Append($"Server:         {loaded.Server ?? "(default) " + ConnectionSettings.DefaultServer}\n");
            text.Append($"Token:          {(loaded.Token is null ? "not set" : "set (not shown)")}\n");
            text.Append($"TLS CA:         {loaded.TlsCa ?? "-"}\n");
            text.Append($"Monitor:        {loaded.Monitor ?? "(default) " + ConnectionSettings.DefaultMonitor}\n");
            text.Append($"Monitor token:  {(loaded.MonitorToken is null ? "not set" : "set (not shown)")}\n");
            Console.Out.Write(text.ToString());
            return Task.FromResult(ExitCodes.Ok);
        }, ct));
        command.Subcommands.Add(show);

        var rmName = new Argument<string>("name") { Description = "The context to remove" };
        var rm = new Command("rm", "Remove a context (and unselect it)") { rmName };
        rm.Aliases.Add("remove");
        rm.SetAction((parse, ct) => CommandRun.RunAsync(() =>
        {
            string context = parse.GetRequiredValue(rmName);
            if (!ContextStore.ForUser().Remove(context))
            {
                throw new CliException(ExitCodes.Failure, $"no context named '{context}'");
            }

            Console.Out.WriteLine($"Removed context '{context}'");
            return Task.FromResult(ExitCodes.Ok);
        }, ct));
        command.Subcommands.Add(rm);
        return command;
    }
}
