using System.Buffers;
using System.Text;
using Herald.Broker.Engines;
using Herald.Broker.Sessions;
using Herald.Broker.Transports;
using Herald.Protocol;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Api;

/// <summary>
/// <c>POST /api/v1/publish</c>, <c>/broadcast</c> and <c>/batch</c> (scope <c>publish</c>): publications made as the
/// key's <see cref="ApiPublisher"/>. A publication with an <c>idempotency_key</c> is first claimed in the
/// <see cref="IIdempotency"/> table (Redis on a cluster node): a repeat within <c>Herald:Api:IdempotencyWindow</c> is
/// answered <c>duplicate: true</c> and not published; a publication the broker refuses gives its claim back.
/// </summary>
internal static class PublishEndpoints
{
    public static void Map(RouteGroupBuilder api)
    {
        api.MapPost("/publish", Publish).RequireScope(ApiScope.Publish);
        api.MapPost("/broadcast", Broadcast).RequireScope(ApiScope.Publish);
        api.MapPost("/batch", Batch).RequireScope(ApiScope.Publish);
    }

    private static Task Publish(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        ApiOptions options = context.RequestServices.GetRequiredService<ApiOptions>();
        PublishRequest request = await HttpExchange.ReadJsonAsync(context, options.MaxBodyBytes, ApiJsonContext.Default.PublishRequest).ConfigureAwait(false)
            ?? throw HttpProblem.Malformed("The body must be a publication: {\"topic\": ..., \"data\" or \"data_base64\": ...}.");
        ApiPublication publication = ApiPublication.Of(request.Topic, request.Data, request.DataBase64, request.Headers, request.IdempotencyKey, options);
        List<ItemResult> results = await PublishAsync(context, [publication], stopAtFailure: true).ConfigureAwait(false);
        await Results.Json(new PublishResult(results[0].Duplicate ?? false), ApiJsonContext.Default.PublishResult).ExecuteAsync(context).ConfigureAwait(false);
    });

    private static Task Broadcast(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        ApiOptions options = context.RequestServices.GetRequiredService<ApiOptions>();
        BroadcastRequest request = await HttpExchange.ReadJsonAsync(context, options.MaxBodyBytes, ApiJsonContext.Default.BroadcastRequest).ConfigureAwait(false)
            ?? throw HttpProblem.Malformed("The body must be a broadcast: {\"topics\": [...], \"data\" or \"data_base64\": ...}.");
        if (request.Topics is not { Count: > 0 } topics)
        {
            throw HttpProblem.Malformed("'topics' must list at least one topic.");
        }

        if (topics.Count > options.MaxBroadcastTopics)
        {
            throw new HttpProblem(StatusCodes.Status400BadRequest, "TooManyTopics", $"A broadcast names at most {options.MaxBroadcastTopics} topics (Herald:Api:MaxBroadcastTopics); this one names {topics.Count}. Nothing was published.");
        }

        // The payload and header block are decoded once; each topic's frame differs only by its topic, and the router
        // encodes each topic's MESSAGE once for all its subscribers.
        ApiPublication first = ApiPublication.Of(topics[0], request.Data, request.DataBase64, request.Headers, request.IdempotencyKey, options);
        var publications = new ApiPublication[topics.Count];
        for (int i = 0; i < topics.Count; i++)
        {
            publications[i] = first with { Topic = topics[i] ?? "" };
        }

        List<ItemResult> results = await PublishAsync(context, publications, stopAtFailure: false).ConfigureAwait(false);
        await Results.Json(new ResultsBody(results), ApiJsonContext.Default.ResultsBody).ExecuteAsync(context).ConfigureAwait(false);
    });

    private static Task Batch(HttpContext context) => HttpExchange.Handle(context, async () =>
    {
        ApiOptions options = context.RequestServices.GetRequiredService<ApiOptions>();
        BatchRequest request = await HttpExchange.ReadJsonAsync(context, options.MaxBodyBytes, ApiJsonContext.Default.BatchRequest).ConfigureAwait(false)
            ?? throw HttpProblem.Malformed("The body must be a batch: {\"items\": [publication, ...]}.");
        if (request.Items is not { Count: > 0 } items)
        {
            throw HttpProblem.Malformed("'items' must hold at least one publication.");
        }

        if (items.Count > options.MaxBatchItems)
        {
            throw new HttpProblem(StatusCodes.Status400BadRequest, "TooManyItems", $"A batch holds at most {options.MaxBatchItems} publications (Herald:Api:MaxBatchItems); this one holds {items.Count}. Nothing was published.");
        }

        var publications = new ApiPublication[items.Count];
        for (int i = 0; i < items.Count; i++)
        {
            PublishRequest item = items[i] ?? throw HttpProblem.Malformed($"items[{i}] must be a publication.");
            publications[i] = ApiPublication.Of(item.Topic, item.Data, item.DataBase64, item.Headers, item.IdempotencyKey, options, $"items[{i}].");
        }

        List<ItemResult> results = await PublishAsync(context, publications, stopAtFailure: false).ConfigureAwait(false);
        await Results.Json(new ResultsBody(results), ApiJsonContext.Default.ResultsBody).ExecuteAsync(context).ConfigureAwait(false);
    });

    /// <summary>
    /// Publishes in order, one result each. With <paramref name="stopAtFailure"/> (a single publication) a refusal is
    /// thrown as its problem; otherwise it is that item's result and the next item goes on.
    /// </summary>
    private static async Task<List<ItemResult>> PublishAsync(HttpContext context, IReadOnlyList<ApiPublication> publications, bool stopAtFailure)
    {
        IServiceProvider services = context.RequestServices;
        ApiOptions options = services.GetRequiredService<ApiOptions>();
        IIdempotency idempotency = services.GetRequiredService<IIdempotency>();
        ApiPublisher publisher = services.GetRequiredService<ApiPublishers>().Of(ApiEndpoints.CallerOf(context));
        var results = new List<ItemResult>(publications.Count);
        var frame = new ArrayBufferWriter<byte>(256);
        await publisher.Turn.WaitAsync(context.RequestAborted).ConfigureAwait(false);
        try
        {
            foreach (ApiPublication publication in publications)
            {
                ItemResult result;
                try
                {
                    result = await PublishOneAsync(publisher, idempotency, options, publication, frame).ConfigureAwait(false);
                }
                catch (HttpProblem e) when (!stopAtFailure)
                {
                    result = new ItemResult(e.Status, Code: e.Code, Detail: e.Message);
                }
                catch (ProtocolException e)
                {
                    HttpProblem problem = HttpExchange.ProblemOf(e);
                    result = stopAtFailure ? throw problem : new ItemResult(problem.Status, Code: problem.Code, Detail: problem.Message);
                }

                results.Add(result);
            }
        }
        finally
        {
            publisher.Turn.Release();
        }

        return results;
    }

    private static async Task<ItemResult> PublishOneAsync(ApiPublisher publisher, IIdempotency idempotency, ApiOptions options, ApiPublication publication, ArrayBufferWriter<byte> frame)
    {
        if (publication.Topic.Length == 0)
        {
            throw HttpProblem.Malformed("'topic' is required.");
        }

        frame.ResetWrittenCount();
        FrameWriter.WritePublish(frame, Encoding.UTF8.GetBytes(publication.Topic), default, PayloadFlags.None, publication.Payload, publication.Headers);
        string? key = publication.IdempotencyKey;
        if (key is not null && !await ClaimAsync(idempotency, publication.Topic, key, options.IdempotencyWindow).ConfigureAwait(false))
        {
            return new ItemResult(StatusCodes.Status200OK, Duplicate: true);
        }

        if (!publisher.Input.TryEnter())
        {
            await ForgetAsync(idempotency, publication.Topic, key).ConfigureAwait(false);
            throw HttpProblem.Unavailable("ShuttingDown", "The broker is shutting down; nothing was published.", 5);
        }

        Refusal refusal;
        try
        {
            refusal = publisher.PublishFrame(frame.WrittenMemory);
        }
        catch (ProtocolException)
        {
            await ForgetAsync(idempotency, publication.Topic, key).ConfigureAwait(false);
            throw;
        }
        catch (ClusterUnavailableException e)
        {
            await ForgetAsync(idempotency, publication.Topic, key).ConfigureAwait(false);
            throw HttpProblem.Unavailable("ClusterUnavailable", e.Message, 1);
        }
        finally
        {
            publisher.Input.Exit();
        }

        if (!refusal.IsNone && refusal.Code != ErrorCode.RateLimited)
        {
            await ForgetAsync(idempotency, publication.Topic, key).ConfigureAwait(false);
            HttpExchange.Outcome(refusal, StatusCodes.Status200OK); // throws the refusal's problem
        }

        return new ItemResult(StatusCodes.Status200OK, Duplicate: key is null ? null : false);
    }

    private static async Task<bool> ClaimAsync(IIdempotency idempotency, string topic, string key, TimeSpan window)
    {
        try
        {
            return await idempotency.ClaimAsync(topic, key, window).ConfigureAwait(false);
        }
        catch (IdempotencyFullException e)
        {
            throw new HttpProblem(StatusCodes.Status503ServiceUnavailable, "IdempotencyFull", e.Message) { RetryAfter = e.RetryAfter };
        }
        catch (ClusterUnavailableException e)
        {
            throw HttpProblem.Unavailable("ClusterUnavailable", e.Message, 1);
        }
    }

    private static async Task ForgetAsync(IIdempotency idempotency, string topic, string? key)
    {
        if (key is not null)
        {
            await idempotency.ForgetAsync(topic, key).ConfigureAwait(false);
        }
    }

    /// <summary>One publication as decoded from its JSON: the payload's bytes and the header block, built once.</summary>
    private sealed record ApiPublication(string Topic, byte[] Payload, byte[] Headers, string? IdempotencyKey)
    {
        public static ApiPublication Of(string? topic, string? data, string? dataBase64, Dictionary<string, string>? headers, string? idempotencyKey, ApiOptions options, string at = "")
        {
            if (data is not null && dataBase64 is not null)
            {
                throw HttpProblem.Malformed($"'{at}data' and '{at}data_base64' are exclusive: give one.");
            }

            byte[] payload;
            try
            {
                payload = dataBase64 is not null ? Convert.FromBase64String(dataBase64) : Encoding.UTF8.GetBytes(data ?? "");
            }
            catch (FormatException)
            {
                throw HttpProblem.Malformed($"'{at}data_base64' is not base64.");
            }

            if (idempotencyKey is { } key && (key.Length == 0 || Encoding.UTF8.GetByteCount(key) > options.MaxIdempotencyKeyBytes))
            {
                throw HttpProblem.Malformed($"'{at}idempotency_key' must be 1 to {options.MaxIdempotencyKeyBytes} bytes (Herald:Api:MaxIdempotencyKeyBytes).");
            }

            byte[] block = headers is { Count: > 0 } ? HeaderBlock.Encode(headers.Select(h => new KeyValuePair<string, string[]>(h.Key, [h.Value]))) : [];
            return new ApiPublication(topic ?? "", payload, block, idempotencyKey);
        }
    }
}
