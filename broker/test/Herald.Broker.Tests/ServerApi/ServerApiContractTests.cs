using Herald.Broker.Api;
using Herald.Broker.Tests.Infrastructure;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using Xunit;
using YamlDotNet.RepresentationModel;

namespace Herald.Broker.Tests.ServerApi;

/// <summary>
/// protocol-spec/server-api.yaml is the server API's contract: every route the broker maps as an API route is there,
/// with its method, and every path there is mapped, so the two cannot drift apart.
/// </summary>
public sealed class ServerApiContractTests
{
    [Fact]
    public async Task Every_mapped_route_is_in_the_openapi_document_and_every_documented_one_is_mapped()
    {
        await using TestBroker broker = await TestBroker.StartAsync(TestApiKeys.Configure);
        var mapped = new HashSet<string>(StringComparer.Ordinal);
        foreach (RouteEndpoint endpoint in broker.Services.GetRequiredService<EndpointDataSource>().Endpoints.OfType<RouteEndpoint>())
        {
            if (endpoint.Metadata.GetMetadata<ApiEndpoint>() is null)
            {
                continue;
            }

            string path = "/" + endpoint.RoutePattern.RawText!.TrimStart('/');
            foreach (string method in endpoint.Metadata.GetMetadata<HttpMethodMetadata>()!.HttpMethods)
            {
                mapped.Add($"{method.ToLowerInvariant()} {path}");
            }
        }

        var stream = new YamlStream();
        using (var reader = new StreamReader(Path.Combine(AppContext.BaseDirectory, "server-api.yaml")))
        {
            stream.Load(reader);
        }

        var paths = (YamlMappingNode)((YamlMappingNode)stream.Documents[0].RootNode).Children[new YamlScalarNode("paths")];
        var documented = new HashSet<string>(StringComparer.Ordinal);
        foreach ((YamlNode path, YamlNode operations) in paths.Children)
        {
            foreach (YamlNode method in ((YamlMappingNode)operations).Children.Keys)
            {
                string verb = ((YamlScalarNode)method).Value!;
                if (verb is "get" or "post" or "put" or "delete" or "patch")
                {
                    documented.Add($"{verb} {((YamlScalarNode)path).Value}");
                }
            }
        }

        Assert.NotEmpty(mapped);
        Assert.Empty(mapped.Except(documented).Order()); // mapped, not in the contract
        Assert.Empty(documented.Except(mapped).Order()); // in the contract, not mapped
        Assert.All(mapped, route => Assert.StartsWith(route.Split(' ')[0] + " " + ApiEndpoints.Prefix + "/", route, StringComparison.Ordinal));
    }
}
