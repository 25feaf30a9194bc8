using Herald.Broker.Sessions;

namespace Herald.Broker.Monitoring;

/// <summary>An open connection as <see cref="SessionRegistry"/> knows it: the session, its transport and when it connected.</summary>
internal sealed record OpenConnection(ClientSession Session, string Transport, DateTimeOffset Since);
