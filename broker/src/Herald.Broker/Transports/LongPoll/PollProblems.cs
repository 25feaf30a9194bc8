using Herald.Broker.Engines;
using Herald.Protocol;
using Microsoft.AspNetCore.Http;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>The problems long-poll answers about a session itself: unknown (404), ended (410), not the owner's credential (401), its state or owner unreachable (503).</summary>
internal static class PollProblems
{
    public static HttpProblem SessionNotFound() => new(StatusCodes.Status404NotFound, "SessionNotFound", "No such session.");

    /// <summary>503 when the backplane keeping shared sessions (a cluster's Redis) does not answer; its message says why.</summary>
    public static HttpProblem ClusterUnavailable(Exception e) => HttpProblem.Unavailable("ClusterUnavailable", $"The cluster's Redis did not answer: {e.Message}", 1);

    /// <summary>503 when the node that owns a session neither answers nor has let it go.</summary>
    public static HttpProblem OwnerUnavailable() => HttpProblem.Unavailable("OwnerUnavailable", "The node that owns this session did not answer; try again.", 1);

    /// <summary>410 for a session that ended, saying why (longpoll §3: <c>reason</c> is the spec §8 code, e.g. SlowConsumer).</summary>
    public static HttpProblem Ended(string reason) => Enum.TryParse(reason, out ErrorCode code) ? Ended(code) : Ended(ErrorCode.None);

    /// <param name="told">The words the session was ended with, said when the application's backend ended it (<c>Disconnected</c>, <c>Revoked</c>): its reason, as TCP's fatal ERROR says it.</param>
    public static HttpProblem Ended(ErrorCode reason, string? told = null) =>
        new(StatusCodes.Status410Gone, "SessionExpired", reason is ErrorCode.Disconnected or ErrorCode.Revoked && told is not null
            ? $"The session has ended ({reason}: {told})."
            : $"The session has ended ({(reason == ErrorCode.None ? "closed by the client" : reason.ToString())}); create a new one.")
        {
            Reason = reason == ErrorCode.None ? "ClientClose" : reason.ToString(),
        };

    /// <summary>401 for a request on a session whose credential is not its owner's (longpoll §1.1).</summary>
    public static HttpProblem NotTheOwner() => new(StatusCodes.Status401Unauthorized, nameof(ErrorCode.AuthenticationFailed), "The credential is not the session owner's.");

    /// <summary>A call to the sessions' shared state; its backplane not answering is 503 <c>ClusterUnavailable</c>.</summary>
    public static async Task<T> OrUnavailable<T>(Task<T> call)
    {
        try
        {
            return await call.ConfigureAwait(false);
        }
        catch (ClusterUnavailableException e)
        {
            throw ClusterUnavailable(e);
        }
    }
}
