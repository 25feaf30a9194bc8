using Herald.Broker.Engines;
using Herald.Broker.Engines.PollSharing;
using Herald.Broker.Sessions;
using Herald.Protocol;
using Microsoft.AspNetCore.Http;

namespace Herald.Broker.Transports.LongPoll;

/// <summary>
/// Requests for a shared session carried between nodes (spec cluster.md §10): a request received here for a session
/// another node owns is sent to that node (or, its owner gone, the session is taken over and the request run here),
/// and one another node sends for a session this node owns is run here.
/// </summary>
internal sealed class SessionCommands(PollSessionStore store, SessionTakeover takeover)
{
    /// <summary>A request another node received for a session this node owns: run as if it came here.</summary>
    public async Task<SessionReply> RunAsync(SessionCommand command)
    {
        if (store.Find(command.Token) is not { } session)
        {
            return new SessionReply { Status = 0 }; // not here (any more): the sender looks again
        }

        try
        {
            return await LongPollEndpoints.RunAsync(session, store, command, CancellationToken.None).ConfigureAwait(false);
        }
        catch (HttpProblem e)
        {
            return new SessionReply { Status = e.Status, Code = e.Code, Message = e.Message, Reason = e.Reason, RetryAfter = e.RetryAfter is { } after ? (int)after.TotalSeconds : null };
        }
        catch (ProtocolException e)
        {
            HttpProblem problem = HttpExchange.ProblemOf(e);
            return new SessionReply { Status = problem.Status, Code = problem.Code, Message = problem.Message };
        }
    }

    /// <summary>
    /// Sends a request for another node's session to that node and returns its answer (spec cluster.md §10). If
    /// the owner is gone (it does not answer and its lease expired), this node takes the session over and carries
    /// the request out itself; an owner that holds its lease but does not answer is 503.
    /// </summary>
    public async Task<SessionReply> ForwardAsync(PollSessionStore.Located at, SessionCommand command, HttpContext context)
    {
        ISharedSessions shared = store.Shared;
        SharedSession? record = at.Remote;
        for (int attempt = 0; attempt < 3; attempt++)
        {
            if (record?.Owner is { } owner && owner != shared.Node)
            {
                SessionReply? reply;
                try
                {
                    reply = await shared.SendAsync(owner, command, shared.Lease + TimeSpan.FromSeconds(1), context.RequestAborted).ConfigureAwait(false);
                }
                catch (ClusterUnavailableException e)
                {
                    throw PollProblems.ClusterUnavailable(e);
                }

                if (reply is null)
                {
                    // No answer: the owner may have carried it out and died, or be slow. Never sent twice; the
                    // client tries again, and by then a dead owner's lease has expired and its session is taken over.
                    throw PollProblems.OwnerUnavailable();
                }

                if (reply.Status > 0)
                {
                    return reply;
                }
            }

            if (store.Find(command.Token) is { } local)
            {
                return await LongPollEndpoints.RunAsync(local, store, command, context.RequestAborted).ConfigureAwait(false);
            }

            record = await PollProblems.OrUnavailable(shared.FindAsync(command.Token)).ConfigureAwait(false);
            if (record is null || record.Ended is not null)
            {
                throw record?.Ended is { } ended ? PollProblems.Ended(ended) : PollProblems.SessionNotFound();
            }

            if (record.Owner is null && await takeover.RunAsync(record, at.Identity!, HttpExchange.RemoteOf(context)).ConfigureAwait(false) is { } taken)
            {
                return await LongPollEndpoints.RunAsync(taken, store, command, context.RequestAborted).ConfigureAwait(false);
            }
        }

        throw PollProblems.OwnerUnavailable();
    }
}
