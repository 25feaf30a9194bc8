using System.Collections.Concurrent;
using System.CommandLine;
using Herald.Cli.Settings;
using Herald.Client;

namespace Herald.Cli.Commands;

/// <summary>
/// <c>herald pub TOPIC [PAYLOAD]</c>: publishes, then flushes (PING/PONG), so it exits only once the broker has
/// every message; a publication the broker refused (permissions) turns the exit code into 4.
/// </summary>
internal static class PubCommand
{
    public static Command Create(GlobalOptions globals)
    {
        var topic = new Argument<string>("topic") { Description = "The topic to publish to (no wildcards)" };
        Argument<string?> payload = MessageOptions.Payload("payload; {{Count}} and {{Time}} are filled in");
        Option<int> count = MessageOptions.Count("Publish the message N times", 1);
        Option<string[]> headers = MessageOptions.Headers();
        var replyTo = new Option<string?>("--reply-to") { Description = "Ask subscribers to answer on this topic", HelpName = "topic" };
        var command = new Command("pub", "Publish a message") { topic, payload, count, headers, replyTo };
        command.SetAction((parse, cancellationToken) => CommandRun.RunAsync(async () =>
        {
            HeraldHeaders headerSet = MessageOptions.ParseHeaders(parse.GetValue(headers));
            string? text = parse.GetValue(payload);
            byte[]? stdin = await MessageOptions.ReadStdinUnlessGivenAsync(text, cancellationToken);
            int times = parse.GetValue(count);
            string target = parse.GetRequiredValue(topic);

            await using HeraldClient client = await BrokerConnection.OpenAsync(CommandRun.Settings(parse, globals), "herald-pub", cancellationToken);
            var refusals = new ConcurrentQueue<HeraldException>();
            client.Error += (_, e) => refusals.Enqueue(e.Exception);
            long bytes = 0;
            for (int i = 1; i <= times; i++)
            {
                byte[] body = stdin ?? MessageOptions.Expand(text!, i);
                bytes += body.Length;
                if (headerSet.Count == 0)
                {
                    await client.PublishAsync(target, body, parse.GetValue(replyTo), cancellationToken);
                }
                else
                {
                    await client.PublishAsync(target, body, headerSet, parse.GetValue(replyTo), cancellationToken);
                }
            }

            // Everything sent before the PONG has been read by the broker, and any refusal of it came first.
            await client.FlushAsync(cancellationToken);
            if (refusals.TryDequeue(out HeraldException? refusal))
            {
                throw refusal;
            }

            CommandRun.Notice(times == 1
                ? $"Published {bytes} bytes to '{target}'"
                : $"Published {times} messages ({bytes} bytes) to '{target}'");
            return ExitCodes.Ok;
        }, cancellationToken));
        return command;
    }
}
