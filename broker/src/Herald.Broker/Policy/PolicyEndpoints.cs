using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;

namespace Herald.Broker.Policy;

/// <summary>The same policies over HTTP (protocol-spec/longpoll.md §4), for Silverlight and Flash HTTP clients.</summary>
internal static class PolicyEndpoints
{
    public static void MapPolicyFiles(this IEndpointRouteBuilder app)
    {
        app.MapGet("/clientaccesspolicy.xml", (HttpContext context) => Xml(context, context.RequestServices.GetRequiredService<PolicyDocuments>().HttpClientAccessPolicy));
        app.MapGet("/crossdomain.xml", (HttpContext context) => Xml(context, context.RequestServices.GetRequiredService<PolicyDocuments>().HttpCrossDomainPolicy));
    }

    private static IResult Xml(HttpContext context, byte[] document) => Results.Bytes(document, "text/xml; charset=utf-8");
}
