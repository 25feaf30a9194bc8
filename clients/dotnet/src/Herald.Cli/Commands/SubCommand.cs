using System.CommandLine;
using System.Threading.Channels;
using Herald.Cli.Output;
using Herald.Cli.Settings;
using Herald.Client;
using Herald.Protocol;

namespace Herald.Cli.Commands;

/// <summary>
/// <c>herald sub PATTERN...</c>: prints what arrives on stdout until <c>--count</c> messages or Ctrl+C; says on
/// stderr when it is subscribed (the broker has every subscription), and what the client surfaces meanwhile:
/// messages the broker dropped for it (slow consumer, or shed by a cluster node), a lost connection and the reconnect. With <c>--join</c> it is
/// present on its topics (spec §15, shown with <c>--info</c>); with <c>--presence-events</c> it also prints their join
/// and leave events, in their turn among the messages, marked as events (never as messages; not counted by <c>--count</c>).
/// </summary>
internal static class SubCommand
{
    public static Command Create(GlobalOptions globals)
    {
        var patterns = new Argument<string[]>("pattern")
        {
            Description = "Topics or patterns: '*' matches one token, '>' the rest (chat.*, orders.>)",
            Arity = ArgumentArity.OneOrMore,
        };
        Option<int> count = MessageOptions.Count("Exit after N messages (0: never)", 0);
        Option<MessageFormat> output = MessageOptions.Output();
        Option<string?> queue = MessageOptions.Queue();
        var join = new Option<bool>("--join") { Description = "Be present on the topics (no wildcards) while subscribed: others see this client in 'herald presence'" };
        var info = new Option<string?>("--info") { Description = "The client info others see beside this client's presence (at most 256 bytes by default)", HelpName = "text" };
        var presenceEvents = new Option<bool>("--presence-events") { Description = "Also print the topics' join and leave events (no wildcards), marked [presence]" };
        var command = new Command("sub", "Subscribe and print messages") { patterns, count, output, queue, join, info, presenceEvents };
        command.SetAction((parse, cancellationToken) => CommandRun.RunAsync(async () =>
        {
            int limit = parse.GetValue(count);
            await using HeraldClient client = await BrokerConnection.OpenAsync(CommandRun.Settings(parse, globals), "herald-sub", cancellationToken, parse.GetValue(info));

            // Handlers hand messages (and presence events, in their turn) to the one writer, in order; a full channel holds the handler back (no loss).
            var received = Channel.CreateBounded<object>(new BoundedChannelOptions(256) { SingleReader = true });
            Exception? closed = null;
            client.Error += (_, e) => CommandRun.Notice(Describe(e.Exception));
            client.StateChanged += (_, e) =>
            {
                if (e.Current == ConnectionState.Reconnecting)
                {
                    CommandRun.Notice($"herald: connection lost ({e.Error?.Message ?? "closed"}); reconnecting");
                }
                else if (e.Current == ConnectionState.Connected && e.Previous == ConnectionState.Reconnecting)
                {
                    CommandRun.Notice($"herald: reconnected to {client.Url}; subscribed again");
                }
                else if (e.Current == ConnectionState.Closed)
                {
                    closed = e.Error;
                    received.Writer.TryComplete();
                }
            };

            var options = new SubscriptionOptions { Queue = parse.GetValue(queue), Join = parse.GetValue(join) };
            if (parse.GetValue(presenceEvents))
            {
                options.OnPresence = e =>
                {
                    if (!received.Writer.TryWrite(e))
                    {
                        received.Writer.WriteAsync(e, cancellationToken).AsTask().GetAwaiter().GetResult(); // its turn among the messages: wait for room as they do
                    }
                };
            }

            var subscriptions = new List<HeraldSubscription>();
            try
            {
                foreach (string pattern in parse.GetRequiredValue(patterns))
                {
                    subscriptions.Add(await client.SubscribeAsync(pattern, (m, token) => received.Writer.WriteAsync(m, token).AsTask(), options, cancellationToken));
                }

                string names = string.Join(", ", subscriptions.Select(s => $"'{s.Pattern}'"));
                CommandRun.Notice($"Subscribed to {names} on {client.Url}" + (options.Join ? " and present there" : "") + (limit > 0 ? $"; exiting after {limit} message(s)" : "; Ctrl+C to stop"));

                var writer = new MessageWriter(Console.OpenStandardOutput(), parse.GetValue(output));
                long number = 0;
                try
                {
                    await foreach (object item in received.Reader.ReadAllAsync(cancellationToken))
                    {
                        if (item is HeraldPresenceEvent presence)
                        {
                            await writer.WriteAsync(presence, cancellationToken);
                            continue;
                        }

                        await writer.WriteAsync((HeraldMessage)item, ++number, cancellationToken);
                        if (number == limit)
                        {
                            return ExitCodes.Ok;
                        }
                    }
                }
                catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
                {
                    return ExitCodes.Ok; // Ctrl+C is how a subscriber without --count ends
                }

                throw closed ?? new HeraldConnectionException("the connection closed");
            }
            finally
            {
                long dropped = subscriptions.Sum(s => s.DroppedMessages);
                if (dropped > 0)
                {
                    CommandRun.Notice($"herald: {dropped} message(s) were dropped by this client: its buffer was full");
                }

                foreach (HeraldSubscription subscription in subscriptions)
                {
                    await subscription.DisposeAsync();
                }
            }
        }, cancellationToken));
        return command;
    }

    /// <summary>
    /// A notice for an error no call was waiting for; the loss ones say what they mean. A <c>MessagesDropped</c> is a slow
    /// consumer's drops or messages a cluster node shed on their way in (spec §6.3): the broker's words say which.
    /// </summary>
    internal static string Describe(HeraldException error) => error.ErrorCode switch
    {
        ErrorCode.MessagesDropped => $"herald: the broker dropped {error.Count} message(s) for this subscriber: {error.Message}",
        ErrorCode.SlowConsumer => "herald: the broker closed this connection as a slow consumer (messages were lost); reconnecting",
        ErrorCode.None => $"herald: {error.Message}",
        _ => $"herald: {error.ErrorCode}: {error.Message}",
    };
}
