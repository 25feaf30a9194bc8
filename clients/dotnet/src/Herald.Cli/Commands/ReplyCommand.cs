using System.CommandLine;
using System.Diagnostics;
using Herald.Cli.Settings;
using Herald.Client;

namespace Herald.Cli.Commands;

/// <summary>
/// <c>herald reply TOPIC</c>: answers each request on the topic, one at a time, with the request itself (an
/// echo, headers included) or with what <c>--command</c> prints given the request on stdin.
/// </summary>
internal static class ReplyCommand
{
    public static Command Create(GlobalOptions globals)
    {
        var topic = new Argument<string>("topic") { Description = "The topic (or pattern) to answer requests on" };
        var run = new Option<string?>("--command")
        {
            Description = "Answer with this shell command's stdout; it reads the request on stdin (HERALD_TOPIC names its topic). Without it: echo",
            HelpName = "cmd args",
        };
        Option<int> count = MessageOptions.Count("Exit after answering N requests (0: never)", 0);
        Option<string?> queue = MessageOptions.Queue();
        var command = new Command("reply", "Answer requests: echo them, or run a command per request") { topic, run, count, queue };
        command.SetAction((parse, cancellationToken) => CommandRun.RunAsync(async () =>
        {
            int limit = parse.GetValue(count);
            string? shellCommand = parse.GetValue(run);
            await using HeraldClient client = await BrokerConnection.OpenAsync(CommandRun.Settings(parse, globals), "herald-reply", cancellationToken);
            var done = new TaskCompletionSource<Exception?>(TaskCreationOptions.RunContinuationsAsynchronously);
            client.Error += (_, e) => CommandRun.Notice(SubCommand.Describe(e.Exception));
            client.StateChanged += (_, e) =>
            {
                if (e.Current == ConnectionState.Closed)
                {
                    done.TrySetResult(e.Error ?? new HeraldConnectionException("the connection closed"));
                }
            };

            long answered = 0;
            await using HeraldSubscription subscription = await client.SubscribeAsync(parse.GetRequiredValue(topic), async (request, token) =>
            {
                if (request.ReplyTo is null)
                {
                    CommandRun.Notice($"herald: a message on '{request.Topic}' has no reply-to: not a request, not answered");
                    return;
                }

                if (shellCommand is null)
                {
                    await (request.Headers.Count == 0 ? request.RespondAsync(request.Payload, token) : request.RespondAsync(request.Payload, request.Headers, token));
                }
                else
                {
                    await request.RespondAsync(await RunAsync(shellCommand, request, token), token);
                }

                long number = Interlocked.Increment(ref answered);
                CommandRun.Notice($"[#{number}] answered a request on '{request.Topic}' ({request.Payload.Length} bytes)");
                if (number == limit)
                {
                    done.TrySetResult(null);
                }
            }, new SubscriptionOptions { Queue = parse.GetValue(queue) }, cancellationToken);
            CommandRun.Notice($"Listening for requests on '{subscription.Pattern}' on {client.Url}" + (shellCommand is null ? " (echo)" : $" (answering with: {shellCommand})"));

            try
            {
                if (await done.Task.WaitAsync(cancellationToken) is { } failure)
                {
                    throw failure;
                }
            }
            catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
            {
                // Ctrl+C is how a responder without --count ends
            }

            return ExitCodes.Ok;
        }, cancellationToken));
        return command;
    }

    /// <summary>Runs <paramref name="command"/> with the shell, the request on its stdin; its stdout is the reply, its stderr goes to ours.</summary>
    private static async Task<byte[]> RunAsync(string command, HeraldMessage request, CancellationToken cancellationToken)
    {
        ProcessStartInfo start = OperatingSystem.IsWindows()
            ? new ProcessStartInfo("cmd.exe") { ArgumentList = { "/c", command } }
            : new ProcessStartInfo("/bin/sh") { ArgumentList = { "-c", command } };
        start.RedirectStandardInput = true;
        start.RedirectStandardOutput = true;
        start.UseShellExecute = false;
        start.Environment["HERALD_TOPIC"] = request.Topic;

        using Process process = Process.Start(start) ?? throw new CliException(ExitCodes.Failure, $"cannot start '{command}'");
        using var output = new MemoryStream();
        Task reading = process.StandardOutput.BaseStream.CopyToAsync(output, cancellationToken);
        try
        {
            await process.StandardInput.BaseStream.WriteAsync(request.Payload, cancellationToken);
            process.StandardInput.Close();
        }
        catch (IOException)
        {
            // the command does not read its stdin (it exited, or closed it): its output is the answer all the same
        }

        await reading;
        await process.WaitForExitAsync(cancellationToken);
        if (process.ExitCode != 0)
        {
            CommandRun.Notice($"herald: '{command}' exited with {process.ExitCode}; its output is the reply all the same");
        }

        return output.ToArray();
    }
}
