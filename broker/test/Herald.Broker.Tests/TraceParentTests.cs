using System.Diagnostics;
using System.Text;
using Herald.Broker.Telemetry;
using Herald.Protocol;

namespace Herald.Broker.Tests;

/// <summary>
/// Which <c>traceparent</c> values start the broker's span (W3C Trace Context level 1: version 00, lower-case
/// hex, non-zero ids, sampled flag), and how it is found in a header block. Pure functions: the span itself is
/// tested over real sockets in <see cref="PublicationTracingTests"/>.
/// </summary>
public sealed class TraceParentTests
{
    private const string Trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    private const string Parent = "00f067aa0ba902b7";

    [Theory]
    [InlineData("00-" + Trace + "-" + Parent + "-01", true)]
    [InlineData("00-" + Trace + "-" + Parent + "-03", true)]   // other flag bits do not matter
    [InlineData("00-" + Trace + "-" + Parent + "-00", false)]  // not sampled
    [InlineData("00-" + Trace + "-" + Parent + "-02", false)]
    [InlineData("01-" + Trace + "-" + Parent + "-01", false)]  // a version this broker does not know
    [InlineData("00-" + Trace + "-" + Parent + "-01-x", false)]
    [InlineData("00-4BF92F3577B34DA6A3CE929D0E0E4736-" + Parent + "-01", false)] // upper case is invalid
    [InlineData("00-00000000000000000000000000000000-" + Parent + "-01", false)]
    [InlineData("00-" + Trace + "-0000000000000000-01", false)]
    [InlineData("00_" + Trace + "-" + Parent + "-01", false)]
    [InlineData("", false)]
    public void Only_a_valid_sampled_version_00_traceparent_is_traced(string value, bool traced)
    {
        bool parsed = BrokerTracing.TryParseSampled(Encoding.ASCII.GetBytes(value), out ActivityTraceId traceId, out ActivitySpanId spanId);

        Assert.Equal(traced, parsed);
        if (traced)
        {
            Assert.Equal(Trace, traceId.ToHexString());
            Assert.Equal(Parent, spanId.ToHexString());
        }
    }

    [Fact]
    public void A_header_value_is_found_ignoring_the_key_case_and_the_first_value_is_taken()
    {
        byte[] block = HeaderBlock.Encode(
        [
            new("X-Tag", ["a", "b"]),
            new("TraceParent", ["first", "second"]),
            new("tracestate", [new string('s', 600)]),
        ]);
        HeaderBlock.Validate(new(block), out _);
        Span<byte> buffer = stackalloc byte[64];

        Assert.True(HeaderBlock.TryCopyFirstValue(new(block), "traceparent"u8, buffer, out int written));
        Assert.Equal("first", Encoding.UTF8.GetString(buffer[..written]));
        Assert.False(HeaderBlock.TryCopyFirstValue(new(block), "tracestate"u8, buffer, out _)); // longer than the buffer
        Assert.False(HeaderBlock.TryCopyFirstValue(new(block), "missing"u8, buffer, out _));
    }
}
