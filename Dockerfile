# Herald broker image: build with the .NET SDK, run on the small ASP.NET runtime image as a non-root user.
#   docker build -t herald .
#   docker run --rm -p 4502-4534:4502-4534 herald
# Configuration comes from environment variables, e.g. -e Herald__Limits__MaxFrameBytes=4194304.

FROM mcr.microsoft.com/dotnet/sdk:10.0 AS build
WORKDIR /src
COPY global.json Directory.Build.props Directory.Packages.props .editorconfig ./
COPY broker/src/Herald.Protocol/Herald.Protocol.csproj broker/src/Herald.Protocol/
COPY broker/src/Herald.Broker/Herald.Broker.csproj broker/src/Herald.Broker/
RUN dotnet restore broker/src/Herald.Broker/Herald.Broker.csproj
COPY broker/src/ broker/src/
RUN dotnet publish broker/src/Herald.Broker/Herald.Broker.csproj -c Release --no-restore -o /app

FROM mcr.microsoft.com/dotnet/aspnet:10.0 AS runtime
WORKDIR /app
COPY --from=build /app ./
USER $APP_UID
ENV DOTNET_gcServer=0 \
    Herald__Tcp__Host=0.0.0.0
EXPOSE 4502-4534
ENTRYPOINT ["dotnet", "Herald.Broker.dll"]
