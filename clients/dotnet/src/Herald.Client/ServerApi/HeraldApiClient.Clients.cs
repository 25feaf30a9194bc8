using System.Globalization;
using System.Text.Json;

namespace Herald.Client;

/// <summary>
/// The server API's actions on clients (scope admin, protocol-spec/server-api.yaml): disconnect, revoke, and subscribe or
/// unsubscribe a connected client. Each reaches every node of a cluster; the broker logs it once with the key's name.
/// </summary>
public sealed partial class HeraldApiClient
{
    /// <summary>
    /// Ends the client whose client id is <paramref name="client"/> (spec §15.1: from presence, <c>/connz</c>, a long-poll
    /// session's answer), telling it <paramref name="reason"/> (a fatal <c>Disconnected</c>; SDKs do not reconnect after it).
    /// </summary>
    /// <exception cref="HeraldApiException"><c>ClientNotFound</c> (404): no node holds it.</exception>
    public Task<HeraldApiReach> DisconnectClientAsync(string client, string? reason = null, CancellationToken cancellationToken = default) =>
        ReachAsync("clients/disconnect", w => Strings(w, ("client", client), ("reason", reason)), cancellationToken);

    /// <summary>Ends every connection and session of <paramref name="identity"/> on every node, telling each <paramref name="reason"/>.</summary>
    public Task<HeraldApiReach> DisconnectIdentityAsync(string identity, string? reason = null, CancellationToken cancellationToken = default) =>
        ReachAsync("clients/disconnect", w => Strings(w, ("identity", identity), ("reason", reason)), cancellationToken);

    /// <summary>
    /// Refuses <paramref name="identity"/> until <paramref name="until"/> on every node (HELLO, refresh, long-poll and SSE
    /// are answered <c>Revoked</c>) and ends what it holds now.
    /// </summary>
    /// <exception cref="HeraldApiException"><c>TooManyRevocations</c> (409): the broker's table is full.</exception>
    public Task<HeraldApiReach> RevokeAsync(string identity, DateTimeOffset until, string? reason = null, CancellationToken cancellationToken = default) =>
        ReachAsync("revocations", w => Strings(w, ("identity", identity), ("until", until.ToUniversalTime().ToString("yyyy-MM-ddTHH:mm:ss.fffZ", CultureInfo.InvariantCulture)), ("reason", reason)), cancellationToken);

    /// <summary>Lifts <paramref name="identity"/>'s revocation everywhere; false when the answering node held none.</summary>
    public async Task<bool> UnrevokeAsync(string identity, CancellationToken cancellationToken = default)
    {
        try
        {
            using JsonDocument _ = await SendAsync(HttpMethod.Delete, "revocations/" + Uri.EscapeDataString(identity), null, cancellationToken).ConfigureAwait(false);
            return true;
        }
        catch (HeraldApiException e) when (e.Status == 404)
        {
            return false;
        }
    }

    /// <summary>The revocations in force on the answering node, earliest end first.</summary>
    public async Task<IReadOnlyList<HeraldApiRevocation>> RevocationsAsync(CancellationToken cancellationToken = default)
    {
        using JsonDocument answer = await SendAsync(HttpMethod.Get, "revocations", null, cancellationToken).ConfigureAwait(false);
        return [.. answer.RootElement.GetProperty("entries").EnumerateArray().Select(e => new HeraldApiRevocation(
            e.GetProperty("identity").GetString() ?? "", e.GetProperty("until").GetDateTimeOffset(), e.GetProperty("reason").GetString() ?? ""))];
    }

    /// <summary>
    /// Subscribes a connected client that asked for server subscriptions (TCP, WebSocket; a long-poll session or SSE stream
    /// that asked, with headers) to <paramref name="pattern"/>; returns the sid the broker gave it (from 2^31 up). Held to the
    /// client's subscribe permissions unless <paramref name="force"/>. <paramref name="join"/> makes it a member of the topic,
    /// <paramref name="presence"/> brings it the topic's presence events: one topic, the client granted presence, its
    /// identity allowed to (which <paramref name="force"/> does not lift).
    /// </summary>
    /// <exception cref="HeraldApiException"><c>ClientNotFound</c>, <c>PermissionDenied</c>, <c>NotSupported</c>, <c>TooManySubscriptions</c> ...</exception>
    public async Task<uint> SubscribeClientAsync(string client, string pattern, bool noEcho = false, bool force = false, bool join = false, bool presence = false, CancellationToken cancellationToken = default)
    {
        using JsonDocument answer = await SendAsync(HttpMethod.Post, "clients/subscribe", w =>
        {
            w.WriteStartObject();
            w.WriteString("client", client);
            w.WriteString("pattern", pattern);
            w.WriteBoolean("no_echo", noEcho);
            w.WriteBoolean("force", force);
            w.WriteBoolean("join", join);
            w.WriteBoolean("presence", presence);
            w.WriteEndObject();
        }, cancellationToken).ConfigureAwait(false);
        return answer.RootElement.GetProperty("sid").GetUInt32();
    }

    /// <summary>Ends every subscription of <paramref name="client"/> to exactly <paramref name="pattern"/>, telling it <paramref name="reason"/>; returns the first sid ended.</summary>
    public async Task<uint> UnsubscribeClientAsync(string client, string pattern, string? reason = null, CancellationToken cancellationToken = default)
    {
        using JsonDocument answer = await SendAsync(HttpMethod.Post, "clients/unsubscribe", w => Strings(w, ("client", client), ("pattern", pattern), ("reason", reason)), cancellationToken).ConfigureAwait(false);
        return answer.RootElement.GetProperty("sid").GetUInt32();
    }

    private async Task<HeraldApiReach> ReachAsync(string path, Action<Utf8JsonWriter> body, CancellationToken cancellationToken)
    {
        using JsonDocument answer = await SendAsync(HttpMethod.Post, path, body, cancellationToken).ConfigureAwait(false);
        JsonElement root = answer.RootElement;
        return new HeraldApiReach(root.GetProperty("clients").GetInt32(), root.GetProperty("nodes").GetInt32(), root.GetProperty("nodes_asked").GetInt32());
    }

    /// <summary>A JSON object of the string members given, those that are null left out.</summary>
    private static void Strings(Utf8JsonWriter w, params (string Name, string? Value)[] members)
    {
        w.WriteStartObject();
        foreach ((string name, string? value) in members)
        {
            if (value is not null)
            {
                w.WriteString(name, value);
            }
        }

        w.WriteEndObject();
    }
}

/// <summary>What a disconnect or revoke reached: the clients it ended, and the nodes that answered of those asked.</summary>
public sealed class HeraldApiReach(int clients, int nodes, int nodesAsked)
{
    public int Clients { get; } = clients;

    public int Nodes { get; } = nodes;

    public int NodesAsked { get; } = nodesAsked;
}

/// <summary>An identity revoked until a time, and the reason its clients are told.</summary>
public sealed class HeraldApiRevocation(string identity, DateTimeOffset until, string reason)
{
    public string Identity { get; } = identity;

    public DateTimeOffset Until { get; } = until;

    public string Reason { get; } = reason;
}
