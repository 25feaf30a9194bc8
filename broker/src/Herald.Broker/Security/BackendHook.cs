using System.Diagnostics;
using System.Net.Http.Headers;
using Herald.Protocol;
using Microsoft.Extensions.Caching.Memory;
using Herald.Broker.Telemetry;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Security;

/// <summary>
/// One hook to the application's backend (protocol-spec/hooks.md §1): a question POSTed as JSON, its answer read within
/// <see cref="MaxAnswerBytes"/>, the whole within <see cref="HookOptions.Timeout"/> (the wait for one of
/// <see cref="HookOptions.MaxConcurrent"/> calls included); allowed and refused answers kept for the <c>cacheSeconds</c>
/// the backend gave, at most <see cref="HookOptions.CacheMaxEntries"/> of them. A call that brings no usable answer
/// (timeout, over the cap, an error status, an answer it cannot read, the backend unreachable) is decided by
/// <see cref="HookOptions.FailurePolicy"/>, counted and logged, never silently. A question never throws.
/// </summary>
/// <remarks>
/// Only the clients waiting on this hook wait: a call holds no lock and no thread, and the cap is the hook's own, so a
/// backend that stalls costs at most <see cref="HookOptions.MaxConcurrent"/> sockets and a timeout per waiting client.
/// The HTTP client comes from <c>IHttpClientFactory</c> (its pooled handlers); while a trace is active the client's own
/// propagation sends <c>traceparent</c>, and a publication's <c>traceparent</c> is passed on when none is.
/// </remarks>
internal sealed class BackendHook : IDisposable
{
    /// <summary>The largest answer read from the backend; a longer one is a failure (unreadable).</summary>
    public const int MaxAnswerBytes = 64 * 1024;

    /// <summary>The longest an answer is cached, whatever the backend says.</summary>
    public const int MaxCacheSeconds = 3600;

    private static readonly MediaTypeHeaderValue Json = new("application/json");

    private readonly HookOptions _options;
    private readonly Uri _url;
    private readonly HttpClient _http;
    private readonly HookMetrics _metrics;
    private readonly ILogger _log;
    private readonly SemaphoreSlim _slots;
    private readonly MemoryCache? _cache;
    private readonly string[] _patterns;

    public BackendHook(string name, HookOptions options, HttpClient http, HookMetrics metrics, ILogger log)
    {
        Name = name;
        _options = options;
        _url = new Uri(options.Url!, UriKind.Absolute);
        _http = http;
        _metrics = metrics;
        _log = log;
        _slots = new SemaphoreSlim(options.MaxConcurrent, options.MaxConcurrent);
        _cache = options.CacheMaxEntries > 0 ? new MemoryCache(new MemoryCacheOptions { SizeLimit = options.CacheMaxEntries }) : null;
        _patterns = options is TopicHookOptions topics ? [.. topics.Patterns] : [];
    }

    /// <summary>connect, subscribe or publish: the <c>herald.hook</c> attribute of its metrics.</summary>
    public string Name { get; }

    public HookFailurePolicy FailurePolicy => _options.FailurePolicy;

    /// <summary>Whether a subscription to <paramref name="pattern"/> could receive a topic the hook's patterns match (none configured: every one).</summary>
    public bool Reaches(string pattern) => _patterns.Length == 0 || Array.Exists(_patterns, hooked => Permissions.Intersects(hooked, pattern));

    /// <summary>Whether the hook's patterns match the one topic <paramref name="topic"/> (none configured: every one).</summary>
    public bool Matches(ReadOnlySpan<char> topic)
    {
        if (_patterns.Length == 0)
        {
            return true;
        }

        foreach (string hooked in _patterns)
        {
            if (Topic.Matches(hooked, topic))
            {
                return true;
            }
        }

        return false;
    }

    /// <summary>
    /// The decision for <paramref name="key"/>: from the cache when the backend's answer is still held there, else the
    /// backend asked with <paramref name="question"/> (JSON) and its answer read by <paramref name="read"/> (null: unreadable).
    /// </summary>
    public ValueTask<Verdict> AskAsync(string key, byte[] question, Func<byte[], Verdict?> read, string? traceParent = null)
    {
        if (_cache is not null && _cache.TryGetValue(key, out Verdict? cached) && cached is not null)
        {
            _metrics.Cached(Name);
            if (cached.Kind == VerdictKind.Refuse)
            {
                _metrics.Refused(Name);
            }

            return new ValueTask<Verdict>(cached);
        }

        return new ValueTask<Verdict>(CallAsync(key, question, read, traceParent));
    }

    private async Task<Verdict> CallAsync(string key, byte[] question, Func<byte[], Verdict?> read, string? traceParent)
    {
        long started = Stopwatch.GetTimestamp();
        using var deadline = new CancellationTokenSource(_options.Timeout);
        bool holding = false;
        string failure;
        string why;
        try
        {
            try
            {
                await _slots.WaitAsync(deadline.Token).ConfigureAwait(false);
                holding = true;
                _metrics.Holding(Name, +1);
            }
            catch (OperationCanceledException)
            {
                return Failed(started, "overloaded", $"{_options.MaxConcurrent} calls (Herald:Hooks:{Name}:MaxConcurrent) were in flight for {_options.Timeout.TotalMilliseconds:0} ms");
            }

            _metrics.Called(Name);
            using var request = new HttpRequestMessage(HttpMethod.Post, _url) { Content = new ByteArrayContent(question) };
            request.Content.Headers.ContentType = Json;
            if (traceParent is not null && Activity.Current is null)
            {
                request.Headers.TryAddWithoutValidation("traceparent", traceParent); // the publication's trace, when the broker has none of its own
            }

            using HttpResponseMessage response = await _http.SendAsync(request, HttpCompletionOption.ResponseHeadersRead, deadline.Token).ConfigureAwait(false);
            if (!response.IsSuccessStatusCode)
            {
                return Failed(started, "status", $"the backend answered {(int)response.StatusCode}");
            }

            byte[]? body = await ReadBoundedAsync(response.Content, deadline.Token).ConfigureAwait(false);
            if (body is null || read(body) is not { } verdict)
            {
                return Failed(started, "unreadable", body is null ? $"the answer was over {MaxAnswerBytes} bytes" : "the answer was not a decision (hooks.md)");
            }

            if (verdict.Kind == VerdictKind.Refuse)
            {
                _metrics.Refused(Name);
            }

            if (_cache is not null && verdict.CacheSeconds > 0)
            {
                _cache.Set(key, verdict, new MemoryCacheEntryOptions { Size = 1, AbsoluteExpirationRelativeToNow = TimeSpan.FromSeconds(Math.Min(verdict.CacheSeconds, MaxCacheSeconds)) });
            }

            _metrics.Decided(Name, Stopwatch.GetElapsedTime(started));
            return verdict;
        }
        catch (OperationCanceledException)
        {
            (failure, why) = ("timeout", $"no answer within {_options.Timeout.TotalMilliseconds:0} ms (Herald:Hooks:{Name}:Timeout)");
        }
        catch (HttpRequestException e)
        {
            (failure, why) = ("unreachable", e.Message);
        }
        catch (Exception e) when (e is IOException or System.Text.Json.JsonException or InvalidOperationException)
        {
            (failure, why) = ("unreadable", e.Message);
        }
        finally
        {
            if (holding)
            {
                _metrics.Holding(Name, -1);
                _slots.Release();
            }
        }

        return Failed(started, failure, why);
    }

    /// <summary>A call without a usable answer: counted, logged, and decided by the failure policy.</summary>
    private Verdict Failed(long started, string failure, string why)
    {
        _metrics.Failed(Name, failure);
        _metrics.Decided(Name, Stopwatch.GetElapsedTime(started));
        _log.HookFailed(Name, failure, why, _options.FailurePolicy.ToString()); // a client fault's rate: a stalled backend writes a summary, not a line per client
        return _options.FailurePolicy == HookFailurePolicy.Allow ? Verdict.Allowed
            : Verdict.Unavailable($"The application's backend did not decide ({failure}); try again later.");
    }

    /// <summary>The answer's bytes, or null past <see cref="MaxAnswerBytes"/>.</summary>
    private static async Task<byte[]?> ReadBoundedAsync(HttpContent content, CancellationToken cancellation)
    {
        if (content.Headers.ContentLength > MaxAnswerBytes)
        {
            return null;
        }

        Stream stream = await content.ReadAsStreamAsync(cancellation).ConfigureAwait(false);
        await using (stream.ConfigureAwait(false))
        {
            var buffer = new MemoryStream();
            byte[] chunk = new byte[4096];
            int read;
            while ((read = await stream.ReadAsync(chunk, cancellation).ConfigureAwait(false)) > 0)
            {
                if (buffer.Length + read > MaxAnswerBytes)
                {
                    return null;
                }

                buffer.Write(chunk, 0, read);
            }

            return buffer.ToArray();
        }
    }

    public void Dispose()
    {
        _cache?.Dispose();
        _slots.Dispose();
    }
}
