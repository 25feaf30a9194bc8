using System.Collections.Concurrent;
using System.Net;
using System.Text.Json;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;

namespace Herald.Broker.Tests.Infrastructure;

/// <summary>
/// An application's backend for the broker's hooks (protocol-spec/hooks.md), over real HTTP on a TestPorts port: each
/// POST to <c>/{hook}</c> is counted, its question and <c>traceparent</c> kept, and answered with what the test's
/// function returns for it (JSON, or any text: garbage); a null answer stalls (never answers, until the broker gives up).
/// </summary>
public sealed class HookBackend : IAsyncDisposable
{
    private readonly WebApplication _app;
    private readonly ConcurrentDictionary<string, int> _calls = new();
    private int _inFlight;
    private int _maxInFlight;

    private HookBackend(WebApplication app, int port)
    {
        _app = app;
        Port = port;
    }

    public int Port { get; }

    /// <summary>Every question asked, in arrival order: the hook, its JSON, and the <c>traceparent</c> header it came with.</summary>
    public ConcurrentQueue<(string Hook, JsonElement Question, string? TraceParent)> Questions { get; } = new();

    /// <summary>Calls being answered now (stalled ones included), and the most there ever were at once.</summary>
    public int InFlight => Volatile.Read(ref _inFlight);

    public int MaxInFlight => Volatile.Read(ref _maxInFlight);

    public string Url(string hook) => $"http://127.0.0.1:{Port}/{hook}";

    public int Calls(string hook) => _calls.GetValueOrDefault(hook);

    /// <param name="answer">The answer to a hook's question (hook, JSON); null: stall.</param>
    public static async Task<HookBackend> StartAsync(Func<string, JsonElement, Task<string?>> answer)
    {
        int port = TestPorts.Free();
        WebApplicationBuilder builder = WebApplication.CreateSlimBuilder();
        builder.Logging.ClearProviders();
        builder.WebHost.UseKestrel(k => k.Listen(IPAddress.Loopback, port));
        WebApplication app = builder.Build();
        HookBackend? backend = null;
        app.MapPost("/{hook}", async (HttpContext context, string hook) =>
        {
            HookBackend self = backend!;
            int now = Interlocked.Increment(ref self._inFlight);
            for (int max = self.MaxInFlight; now > max && Interlocked.CompareExchange(ref self._maxInFlight, now, max) != max; max = self.MaxInFlight)
            {
            }

            try
            {
                self._calls.AddOrUpdate(hook, 1, (_, n) => n + 1);
                JsonElement question = await JsonSerializer.DeserializeAsync<JsonElement>(context.Request.Body, cancellationToken: context.RequestAborted);
                self.Questions.Enqueue((hook, question, context.Request.Headers["traceparent"].FirstOrDefault()));
                string? text = await answer(hook, question);
                if (text is null)
                {
                    await Task.Delay(Timeout.Infinite, context.RequestAborted); // stalls until the broker gives up
                    return;
                }

                context.Response.ContentType = "application/json";
                await context.Response.WriteAsync(text, context.RequestAborted);
            }
            catch (OperationCanceledException)
            {
                // the broker's timeout ended the call
            }
            finally
            {
                Interlocked.Decrement(ref self._inFlight);
            }
        });
        await app.StartAsync();
        backend = new HookBackend(app, port);
        return backend;
    }

    public async ValueTask DisposeAsync()
    {
        await _app.StopAsync();
        await _app.DisposeAsync();
    }
}
