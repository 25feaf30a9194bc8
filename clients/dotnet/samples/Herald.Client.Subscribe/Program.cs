// Subscribes with the Herald .NET client and prints what arrives, one JSON object a line on stdout, as
// UTF-8 (characters beyond U+FFFF, such as emoji, as \u escapes), then exits after --count messages:
//
//   dotnet Herald.Client.Subscribe.dll --url tcp://127.0.0.1:4502 --pattern "chat.>" [--count N] [--credential TOKEN]
//
//   {"ready":true,"pattern":"chat.>","url":"tcp://127.0.0.1:4502"}      once the broker has the subscription
//   {"topic":"chat.room1","payload":"hello","headers":{"X-Tag":["a","b"]}}   per message (payload as UTF-8 text)
//
// Exit codes: 0 received N messages, 1 the broker could not be reached or refused, the subscription was not
// confirmed within 30 seconds, or it ended before N messages, 2 bad arguments.
using System.Globalization;
using System.Text.Encodings.Web;
using System.Text.Json;
using Herald.Client;

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
int received = 0;
try
{
    await using var client = new HeraldClient(url, new HeraldClientOptions { ClientName = "herald-subscribe", Credential = credential });
    HeraldSubscription subscription;
    using (var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30)))
    {
        subscription = await client.SubscribeAsync(pattern, cancellationToken: deadline.Token);
    }

    await using (subscription)
    {
        json.WriteStartObject();
        json.WriteBoolean("ready", true);
        json.WriteString("pattern", pattern);
        json.WriteString("url", client.Url);
        json.WriteEndObject();
        await WriteLineAsync();
        await foreach (HeraldMessage message in subscription)
        {
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
            if (++received == count)
            {
                return 0;
            }
        }
    }

    Console.Error.WriteLine($"error: the subscription to {pattern} ended after {received} of {count} message(s)");
    return 1;
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
