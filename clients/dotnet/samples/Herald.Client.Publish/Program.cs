// Publishes a text message with the Herald .NET client, then flushes (PING/PONG) so it has reached the
// broker before the process exits:
//
//   dotnet Herald.Client.Publish.dll --url tcp://127.0.0.1:4502 --topic chat.room1 --message hello
//       [--header Key=Value]... [--count N] [--credential TOKEN]
//
// --header splits at the first '=' (a value may be empty or hold '='); the same key again adds a value to
// it (a multi-valued header). Exit codes: 0 published and flushed, 1 the broker could not be reached,
// refused, or did not confirm within 30 seconds, 2 bad arguments (a header HeraldHeaders refuses too).
//
// With OTEL_EXPORTER_OTLP_ENDPOINT set (the OpenTelemetry environment: see ../Shared/SampleTracing.cs), each
// publication's "send <topic>" span is exported and its traceparent travels in the message's headers.
using System.Globalization;
using Herald.Client;
using Herald.Client.Samples;

const string Usage = "usage: Herald.Client.Publish --url tcp://host:4502|http://host:8080 --topic T --message M [--header Key=Value]... [--count N] [--credential TOKEN]";

string? url = null, topic = null, message = null, credential = null;
int count = 1;
HeraldHeaders headers = HeraldHeaders.Empty;
for (int i = 0; i < args.Length; i++)
{
    string? value = i + 1 < args.Length ? args[i + 1] : null;
    switch (args[i])
    {
        case "--url" when value is not null:
            url = value;
            i++;
            break;
        case "--topic" when value is not null:
            topic = value;
            i++;
            break;
        case "--message" when value is not null:
            message = value;
            i++;
            break;
        case "--header" when value is not null:
            int equals = value.IndexOf('=', StringComparison.Ordinal);
            try
            {
                headers = equals > 0 ? headers.Add(value[..equals], value[(equals + 1)..]) : throw new ArgumentException("expected Key=Value");
            }
            catch (ArgumentException e)
            {
                Console.Error.WriteLine($"bad header '{value}': {e.Message}\n{Usage}");
                return 2;
            }

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

if (url is null || topic is null || message is null)
{
    Console.Error.WriteLine(Usage);
    return 2;
}

using SampleTracing tracing = SampleTracing.FromEnvironment(); // disposed last: flushes the spans at exit
using var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(30));
try
{
    await using var client = new HeraldClient(url, new HeraldClientOptions { ClientName = "herald-publish", Credential = credential });
    for (int i = 0; i < count; i++)
    {
        // Without --header, a publication without a header block: what any broker takes.
        await (headers.Count == 0
            ? client.PublishAsync(topic, message, cancellationToken: deadline.Token)
            : client.PublishAsync(topic, message, headers, cancellationToken: deadline.Token));
    }

    await client.FlushAsync(deadline.Token);
    Console.WriteLine($"published {count} message(s) to {topic} on {client.Url}");
    return 0;
}
catch (Exception e) when (e is HeraldException or ArgumentException)
{
    Console.Error.WriteLine($"error: {e.Message}");
    return 1;
}
catch (OperationCanceledException)
{
    Console.Error.WriteLine($"error: the broker at {url} did not confirm the messages within 30 seconds");
    return 1;
}
