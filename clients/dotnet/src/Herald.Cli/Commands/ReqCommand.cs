using System.CommandLine;
using Herald.Cli.Output;
using Herald.Cli.Settings;
using Herald.Client;

namespace Herald.Cli.Commands;

/// <summary>
/// <c>herald req TOPIC [PAYLOAD]</c>: one request, its reply on stdout; exit 5 when nobody subscribes to the
/// topic (the broker says so at once) or no reply comes within <c>--timeout</c>.
/// </summary>
internal static class ReqCommand
{
    public static Command Create(GlobalOptions globals)
    {
        var topic = new Argument<string>("topic") { Description = "The topic a responder subscribes to" };
        Argument<string?> payload = MessageOptions.Payload("request");
        Option<string[]> headers = MessageOptions.Headers();
        Option<MessageFormat> output = MessageOptions.Output();
        var timeout = new Option<TimeSpan>("--timeout", "-t")
        {
            Description = "How long to wait for the reply: 500ms, 5s, 1m",
            HelpName = "duration",
            DefaultValueFactory = _ => TimeSpan.FromSeconds(5),
            CustomParser = result => Durations.TryParse(result.Tokens.Single().Value, out TimeSpan value) ? value : Invalid(result),
        };
        var command = new Command("req", "Send a request and print the reply") { topic, payload, headers, output, timeout };
        command.SetAction((parse, cancellationToken) => CommandRun.RunAsync(async () =>
        {
            HeraldHeaders headerSet = MessageOptions.ParseHeaders(parse.GetValue(headers));
            string? text = parse.GetValue(payload);
            byte[] body = await MessageOptions.ReadStdinUnlessGivenAsync(text, cancellationToken) ?? MessageOptions.Expand(text!, 1);
            string target = parse.GetRequiredValue(topic);
            TimeSpan wait = parse.GetValue(timeout);

            await using HeraldClient client = await BrokerConnection.OpenAsync(CommandRun.Settings(parse, globals), "herald-req", cancellationToken);
            HeraldMessage reply = headerSet.Count == 0
                ? await client.RequestAsync(target, body, wait, cancellationToken)
                : await client.RequestAsync(target, body, headerSet, wait, cancellationToken);
            await new MessageWriter(Console.OpenStandardOutput(), parse.GetValue(output)).WriteAsync(reply, number: null, cancellationToken);
            return ExitCodes.Ok;
        }, cancellationToken));
        return command;
    }

    private static TimeSpan Invalid(System.CommandLine.Parsing.ArgumentResult result)
    {
        result.AddError($"'{result.Tokens.Single().Value}' is not a duration: use 500ms, 5s, 1m or a number of seconds.");
        return default;
    }
}
