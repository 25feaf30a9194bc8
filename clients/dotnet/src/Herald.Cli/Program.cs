// herald: the command-line client of a Herald broker (README "The herald CLI"; clients/dotnet/README.md).
//
//   herald sub 'chat.>'                       herald pub chat.room1 hello
//   herald reply svc.echo                     herald req svc.echo hi
//   herald server info                        herald context add local --server tcp://localhost:4502 --select
//   herald presence room.1                     herald sub room.1 --join --info Ada --presence-events
//   herald api publish orders.1 paid          herald api new-key --name billing --scope publish
//
// Exit codes (ExitCodes.cs): 0 ok, 1 failure, 2 usage, 3 cannot connect, 4 refused, 5 no reply, 130 interrupted.
using System.CommandLine;
using System.CommandLine.Invocation;
using Herald.Cli;
using Herald.Cli.Commands;
using Herald.Cli.Settings;

var globals = new GlobalOptions();
var root = new RootCommand(
    "herald: publish, subscribe, request and reply on a Herald broker, read its monitoring endpoints, keep connection contexts.\n" +
    "Settings: flags > environment (HERALD_URL, HERALD_TOKEN, HERALD_CONTEXT, HERALD_TLS_CA, HERALD_MONITOR_URL, HERALD_MONITOR_TOKEN) > context > defaults.\n" +
    "Exit codes: 0 ok, 1 failure, 2 usage, 3 cannot connect, 4 refused (authentication, permission), 5 no reply (timeout, no responders).");
foreach (Option option in globals.All)
{
    root.Options.Add(option);
}

root.Subcommands.Add(PubCommand.Create(globals));
root.Subcommands.Add(SubCommand.Create(globals));
root.Subcommands.Add(ReqCommand.Create(globals));
root.Subcommands.Add(ReplyCommand.Create(globals));
root.Subcommands.Add(PresenceCommand.Create(globals));
root.Subcommands.Add(ServerCommand.Create(globals));
root.Subcommands.Add(ContextCommand.Create(globals));
root.Subcommands.Add(ApiCommand.Create());

ParseResult parse = root.Parse(args);
var configuration = new InvocationConfiguration { EnableDefaultExceptionHandler = false };
if (parse.Action is ParseErrorAction errors)
{
    errors.ShowHelp = false;
    errors.ShowTypoCorrections = false; // it offers options for a misplaced argument; the hint below says where help is
    await parse.InvokeAsync(configuration);
    string command = string.Join(' ', parse.CommandResult.Command.Parents.OfType<Command>().Reverse().Select(c => c.Name).Append(parse.CommandResult.Command.Name));
    Console.Error.WriteLine($"Run '{command} --help' for usage.");
    return ExitCodes.Usage;
}

return await parse.InvokeAsync(configuration);
