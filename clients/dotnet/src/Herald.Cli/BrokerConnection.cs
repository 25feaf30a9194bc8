using Herald.Cli.Settings;
using Herald.Client;

namespace Herald.Cli;

/// <summary>Opens the <see cref="HeraldClient"/> a command uses, from the resolved <see cref="ConnectionSettings"/>.</summary>
internal static class BrokerConnection
{
    /// <summary>
    /// A client connected now, so that an unreachable broker or a refused token fails here with its own exit
    /// code rather than at the first publication.
    /// </summary>
    /// <param name="info">The client info others see beside this client's presence (<c>sub --info</c>), or <c>null</c>.</param>
    public static async Task<HeraldClient> OpenAsync(ConnectionSettings settings, string clientName, CancellationToken cancellationToken, string? info = null)
    {
        TrustedCa? ca = TrustedCa.From(settings.TlsCa);
        HeraldClient client;
        try
        {
            client = new HeraldClient(new HeraldClientOptions
            {
                Url = settings.Server,
                Credential = settings.Token,
                ClientName = clientName,
                Info = info,
                ServerCertificateValidation = ca is null ? null : ca.Validate,
            });
        }
        catch (ArgumentException e)
        {
            throw new CliException(ExitCodes.Usage, e.ParamName == nameof(HeraldClientOptions.Info) ? $"--info: {e.Message}" : $"'{settings.Server}' is not a broker address: {e.Message}");
        }

        try
        {
            await client.ConnectAsync(cancellationToken);
            return client;
        }
        catch
        {
            await client.DisposeAsync();
            throw;
        }
    }
}
