/**
 * One trace per message (issue 20.3) across both SDKs and the broker, read back from a real OTLP receiver:
 * the .NET sample publisher (TCP) and the .NET sample subscriber (TCP), each a process exporting by OTLP/HTTP
 * as the OpenTelemetry environment tells it; the broker exporting its route span; and a TypeScript subscriber
 * over long-poll in this process, exporting through `@opentelemetry/exporter-trace-otlp-proto`. The four
 * exporters send to one receiver, and the spans of the one message form one trace: the publisher's PRODUCER
 * span, the broker's span under it, and both consumers' CONSUMER spans under it and linked to it.
 *
 * Its own file, so its own process: the global tracer provider registered here reaches no other test.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { connect, type HeraldClient, type Message } from "@herald/client";
import { Broker } from "./helpers/broker.js";
import { OtlpReceiver, SpanKind, type ReceivedSpan } from "./helpers/otlp.js";
import { runPublisher, sampleDll, SubscriberProcess } from "./helpers/samples.js";
import { uniqueTopic, until, within } from "./helpers/wait.js";

let broker: Broker;
let receiver: OtlpReceiver;
let provider: BasicTracerProvider;
const clients: HeraldClient[] = [];
const subscribers: SubscriberProcess[] = [];

/** The OpenTelemetry environment of the .NET samples: OTLP/HTTP to the receiver, short batches. */
const otel = (service: string): NodeJS.ProcessEnv => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
  OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
  OTEL_SERVICE_NAME: service,
  OTEL_BSP_SCHEDULE_DELAY: "200",
});

before(async () => {
  // Built before anything starts, so a build never runs into a test's bounds.
  sampleDll("Herald.Client.Publish");
  sampleDll("Herald.Client.Subscribe");
  receiver = await OtlpReceiver.start();
  broker = await Broker.start([
    "--Herald:Telemetry:Otlp:Enabled=true",
    "--Herald:Telemetry:Otlp:Protocol=HttpProtobuf",
    `--Herald:Telemetry:Otlp:Endpoint=${receiver.url}`,
    "--Herald:LongPoll:PollTimeout=00:00:03",
  ]);
  // What a Node application does to trace: a context manager, the W3C propagator, a provider exporting by OTLP.
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.name": "herald-ts-subscriber" }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: `${receiver.url}/v1/traces` }), { scheduledDelayMillis: 200 })],
  });
  trace.setGlobalTracerProvider(provider);
});

after(async () => {
  for (const s of subscribers) s.kill();
  await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
  await broker?.stop();
  await provider?.shutdown();
  trace.disable();
  propagation.disable();
  context.disable();
  await receiver?.stop();
});

test(".NET publisher → broker → .NET and TypeScript subscribers: one trace in the OTLP receiver", { timeout: 180_000 }, async () => {
  const topic = uniqueTopic("trace.otlp");

  // The TypeScript subscriber, over long-poll, with a handler: the SDK runs it in its CONSUMER span.
  const tsSubscriber = await connect(broker.httpUrl, { name: "ts-subscriber", transport: "longpoll" });
  clients.push(tsSubscriber);
  let handled!: (m: Message) => void;
  const tsGot = new Promise<Message>((resolve) => (handled = resolve));
  const sub = tsSubscriber.subscribe(topic, (message) => handled(message));
  await sub.ready;

  // The .NET subscriber, over TCP, as a process: ready line, then one message, then it exits (flushing its spans).
  const dotnetSubscriber = SubscriberProcess.start(["--url", broker.tcpUrl, "--pattern", topic, "--count", "1"], otel("herald-dotnet-subscriber"));
  subscribers.push(dotnetSubscriber);
  await dotnetSubscriber.untilLines(1, 60_000);

  const published = await runPublisher(["--url", broker.tcpUrl, "--topic", topic, "--message", "traced"], otel("herald-dotnet-publisher"));
  assert.equal(published.status, 0, published.output);

  const message = await within(tsGot, 30_000, "the message at the TypeScript subscriber");
  const [, line] = await dotnetSubscriber.untilLines(2, 60_000);
  assert.equal(await within(dotnetSubscriber.exited, 60_000, "the .NET subscriber's exit"), 0, dotnetSubscriber.output);

  // The publisher's context, as it travelled: 00-<trace>-<the send span>-01, the same bytes to both transports.
  const traceparent = message.headers.get("traceparent");
  assert.match(traceparent ?? "", /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/, `headers: ${JSON.stringify(message.headers)}`);
  const [, traceId, sendSpanId] = traceparent!.split("-") as [string, string, string];
  assert.deepEqual((line as { headers: Record<string, string[]> }).headers.traceparent, [traceparent]);

  // Four exporters, one trace. The broker's batch is pushed on its schedule; this process's on ours.
  const ofTrace = (): ReceivedSpan[] => receiver.spans.filter((s) => s.traceId === traceId);
  await until(
    async () => {
      await provider.forceFlush();
      return ofTrace().length >= 4;
    },
    60_000,
    `four spans of trace ${traceId} in the receiver`,
  );
  assert.deepEqual(receiver.faults, [], "every export decoded");
  const spans = ofTrace();
  assert.equal(spans.length, 4, JSON.stringify(spans, null, 1));

  const send = spans.find((s) => s.kind === SpanKind.PRODUCER)!;
  assert.deepEqual([send.service, send.scope, send.name], ["herald-dotnet-publisher", "Herald.Client", `send ${topic}`]);
  assert.equal(send.spanId, sendSpanId, "the traceparent names the publisher's span");
  assert.equal(send.parentSpanId, "", "a root: the sample publishes outside any span");

  const route = spans.find((s) => s.scope === "Herald.Broker")!;
  assert.ok(route, "the broker's span");
  // Named 'route' whatever the topic (a publisher does not choose the broker's span names); the topic is an attribute.
  assert.deepEqual([route.service, route.name, route.kind, route.parentSpanId], ["herald", "route", SpanKind.CONSUMER, send.spanId]);
  assert.equal(route.attributes["messaging.destination.name"], topic);
  assert.equal(route.attributes["herald.route.matched"], 2);
  assert.equal(route.attributes["herald.route.queued"], 2);
  assert.equal(route.attributes["herald.transport"], "tcp");

  const processed = spans.filter((s) => s.kind === SpanKind.CONSUMER && s.scope !== "Herald.Broker");
  assert.deepEqual(
    processed.map((p) => [p.service, p.scope, p.name]).sort(),
    [
      ["herald-dotnet-subscriber", "Herald.Client", `process ${topic}`],
      ["herald-ts-subscriber", "@herald/client", `process ${topic}`],
    ],
  );
  for (const p of processed) {
    assert.equal(p.parentSpanId, send.spanId, `${p.service}: a child of the publisher's span (the broker's is its sibling)`);
    assert.deepEqual(p.links, [{ traceId, spanId: send.spanId }], `${p.service}: linked to the creation context`);
    assert.equal(p.attributes["messaging.destination.name"], topic);
    assert.equal(p.attributes["messaging.operation.type"], "process");
  }
});
