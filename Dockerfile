# Herald broker image: built with the .NET SDK, run on the small chiseled ASP.NET runtime image (no shell,
# no package manager) as its non-root 'app' user (UID 1654).
#   docker build -t herald .
#   docker run --rm -p 4502-4534:4502-4534 -p 943:943 -p 8080:8080 herald
# Monitoring (probes, /metrics, /varz, /connz, /subsz) listens on 127.0.0.1:8222 inside the container: the
# HEALTHCHECK reaches it, nothing outside does. To read it from the host only:
#   -e Herald__Monitoring__Host=0.0.0.0 -p 127.0.0.1:8222:8222
# Configuration comes from environment variables (':' becomes '__'), e.g. -e Herald__Limits__MaxFrameBytes=4194304.
# Port 943 binds as non-root with Docker's default networking (Docker 20.10+ sets
# net.ipv4.ip_unprivileged_port_start=0 in the container's network namespace), not with --network host:
# there, add -e Herald__Policy__Port=-1 (or a port above 1023). See README "Operations".

FROM mcr.microsoft.com/dotnet/sdk:10.0 AS build
WORKDIR /src
COPY global.json Directory.Build.props Directory.Build.targets Directory.Packages.props .editorconfig ./
COPY broker/src/Herald.Protocol/Herald.Protocol.csproj broker/src/Herald.Protocol/
COPY broker/src/Herald.Broker/Herald.Broker.csproj broker/src/Herald.Broker/
RUN dotnet restore broker/src/Herald.Broker/Herald.Broker.csproj
COPY broker/src/ broker/src/
RUN dotnet publish broker/src/Herald.Broker/Herald.Broker.csproj -c Release --no-restore -o /app -p:UseAppHost=false

FROM mcr.microsoft.com/dotnet/aspnet:10.0-noble-chiseled AS runtime
WORKDIR /app
COPY --from=build /app ./
USER $APP_UID
# The broker binds its own listeners (Herald:*), so the image's default ASPNETCORE_HTTP_PORTS is cleared.
ENV ASPNETCORE_HTTP_PORTS= \
    DOTNET_gcServer=0 \
    Herald__Tcp__Host=0.0.0.0 \
    Herald__Http__Host=0.0.0.0 \
    Herald__Logging__Format=json
EXPOSE 4502-4534 943 8080
# No curl in a chiseled image: the broker probes itself (GET /healthz on its monitoring listener; exit 0 or 1).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 CMD ["dotnet", "Herald.Broker.dll", "--probe"]
# SIGTERM (docker stop) drains: queued messages are delivered, then each client gets a ShuttingDown ERROR.
STOPSIGNAL SIGTERM
ENTRYPOINT ["dotnet", "Herald.Broker.dll"]
