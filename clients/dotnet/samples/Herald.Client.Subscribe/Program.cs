// Subscribes with the Herald .NET client and prints what arrives, one JSON object a line on stdout, as
// UTF-8 (characters beyond U+FFFF, such as emoji, as \u escapes), then exits after --count messages:
//
//   dotnet Herald.Client.Subscribe.dll --url tcp://127.0.0.1:4502 --pattern "chat.>" [--count N] [--credential TOKEN]
//
//   {"ready":true,"pattern":"chat.>","url":"tcp://127.0.0.1:4502"}      once the broker has the subscription
//   {"topic":"chat.room1","payload":"hello","headers":{"X-Tag":["a","b"]}}   per message (payload as UTF-8 text)
//
// Exit codes: 0 received N messages, 1 the broker could not be reached or refused, the subscription was not
// confirmed within 30 seconds, or the connection was closed for good before N messages, 2 bad arguments.
//
// With OTEL_EXPORTER_OTLP_ENDPOINT set (the OpenTelemetry environment: see ../Shared/SampleTracing.cs), each
// message's handler runs in a "process <topic>" span, child of the publisher's span its traceparent names.
using System.Globalization;
using System.Text.Encodings.Web;
using System.Text.Json;
using Herald.Client;
using Herald.Client.Samples;

const string Usage = "usage: Herald.Client.Subscribe --url tcp://host:4502|http://host:8080 --pattern P [--count N] [--credential TOKEN]";

string? url = null, pattern = null, credential = null;
int count = 1;
for (int i = 0; i < args.Length; i++)
{
    string? value = i + 1 < args.Length ? args[i + 1] : null;
    switch (args[i])
    {
        case "--url" when value is not null:
            url = value;
            i++;
            break;
        case "--pattern" when value is not null:
            pattern = value;
            i++;
            break;
        case "--credential" when value is not null:
            credential = value;
            i++;
            break;
        case "--count" when int.TryParse(value, NumberStyles.None, CultureInfo.InvariantCulture, out count) && count > 0:
            i++;
            break;
        case "-h" or "--help":
            Console.WriteLine(Usage);
            return 0;
        default:
            Console.Error.WriteLine($"unexpected argument '{args[i]}'\n{Usage}");
            return 2;
    }
}

if (url is null || pattern is null)
{
    Console.Error.WriteLine(Usage);
    return 2;
}

// Written as UTF-8 bytes to the raw stream: the console's encoding (LANG) never changes a header value.
await using Stream stdout = Console.OpenStandardOutput();
await using var json = new Utf8JsonWriter(stdout, new JsonWriterOptions { Encoder = JavaScriptEncoder.UnsafeRelaxedJsonEscaping });
using SampleTracing tracing = SampleTracing.FromEnvironment(); // disposed last: flushes the spans at exit
int received = 0;
var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
var readyPrinted = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
try
{
    await using var client = new HeraldClient(url, new HeraldClientOptions { ClientName = "herald-subscribe", Credential = credential });
    client.StateChanged += (_, e) =>
    {
        if (e.Current == ConnectionState.Closed)
        {
            string why = e.Error?.Message ?? "closed";
            done.TrySetException(new HeraldException($"the connection closed after {Volatile.Read(ref received)} of {count} message(s): {why}"));
        }
    };

    // A handler, one message at a time and in order: the client runs each call in its process span.
    HeraldSubscription subscription;
    using (var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30)))
    {
        subscription = await client.SubscribeAsync(pattern, async message =>
        {
            await readyPrinted.Task; // the ready line comes first, and the writer is never used by two at once
            if (Volatile.Read(ref received) == count)
            {
                return; // more than asked for: not printed
            }

            json.WriteStartObject();
            json.WriteString("topic", message.Topic);
            json.WriteString("payload", message.GetString());
            json.WriteStartObject("headers");
            foreach ((string key, IReadOnlyList<string> values) in message.Headers)
            {
                json.WriteStartArray(key);
                foreach (string v in values)
                {
                    json.WriteStringValue(v);
                }

                json.WriteEndArray();
            }

            json.WriteEndObject();
            json.WriteEndObject();
            await WriteLineAsync();
            if (Interlocked.Increment(ref received) == count)
            {
                done.TrySetResult();
            }
        }, cancellationToken: deadline.Token);
    }

    await using (subscription)
    {
        json.WriteStartObject();
        json.WriteBoolean("ready", true);
        json.WriteString("pattern", pattern);
        json.WriteString("url", client.Url);
        json.WriteEndObject();
        await WriteLineAsync();
        readyPrinted.SetResult();
        await done.Task;
    }

    await tracing.WaitForProcessedAsync(count, TimeSpan.FromSeconds(5));
    return 0;
}
catch (Exception e) when (e is HeraldException or ArgumentException)
{
    Console.Error.WriteLine($"error: {e.Message}");
    return 1;
}
catch (OperationCanceledException)
{
    Console.Error.WriteLine($"error: the broker at {url} did not confirm the subscription within 30 seconds");
    return 1;
}

// Ends the object just written with a newline and flushes it, so a reader sees each line as it comes.
async Task WriteLineAsync()
{
    await json.FlushAsync();
    json.Reset();
    stdout.WriteByte((byte)'\n');
    await stdout.FlushAsync();
}
