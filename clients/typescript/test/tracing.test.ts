/**
 * One trace per message (issue 20.3) through the OpenTelemetry API, against a real broker over TCP,
 * WebSocket and long-poll, recorded by the SDK's in-memory exporter: the publisher's PRODUCER span, its context carried
 * in the message's `traceparent`, the subscriber's CONSUMER span under it (parent and link). Without a
 * tracer provider nothing is added, and an unsampled context injects nothing.
 *
 * Its own file, so its own process: the global tracer provider registered here reaches no other test.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  ROOT_CONTEXT,
  SpanKind,
  TraceFlags,
  context,
  propagation,
  trace,
  type SpanContext,
} from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { connect, headersGetter, type ConnectOptions, type HeraldClient, type Message } from "@herald/client";
import { Broker } from "./helpers/broker.js";
import { KINDS, reach, type Kind } from "./helpers/clients.js";
import { uniqueTopic, until, within } from "./helpers/wait.js";

let broker: Broker;
const clients: HeraldClient[] = [];
const fast: ConnectOptions = { reconnectDelayMs: 100, maxReconnectDelayMs: 1000, connectTimeoutMs: 5000 };
const exporter = new InMemorySpanExporter();

async function open(kind: Kind): Promise<HeraldClient> {
  const { url, options } = reach(broker, kind);
  const client = await connect(url, { ...fast, ...options, name: `trace-${kind}` });
  clients.push(client);
  return client;
}

/** A sampled remote context, as an incoming request of the application would make active. */
const REMOTE: SpanContext = {
  traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
  spanId: "00f067aa0ba902b7",
  traceFlags: TraceFlags.SAMPLED,
  isRemote: true,
};

/** Subscribes with a handler that hands each message, and the span active while it ran, to `got`. */
async function handlerSubscription(client: HeraldClient, topic: string): Promise<{ next: () => Promise<{ message: Message; active: SpanContext | undefined }> }> {
  const waiting: ((v: { message: Message; active: SpanContext | undefined }) => void)[] = [];
  const queue: { message: Message; active: SpanContext | undefined }[] = [];
  const sub = client.subscribe(topic, async (message) => {
    const active = trace.getActiveSpan()?.spanContext();
    await new Promise((r) => setTimeout(r, 5)); // an async handler: its span ends when it settles
    const item = { message, active };
    const w = waiting.shift();
    if (w) w(item);
    else queue.push(item);
  });
  await sub.ready;
  return {
    next: () => within(queue.length > 0 ? Promise.resolve(queue.shift()!) : new Promise((r) => waiting.push(r)), 10_000, `a message on '${topic}'`),
  };
}

before(async () => {
  broker = await Broker.start(["--Herald:LongPoll:PollTimeout=00:00:03"]);
  // What an application does to trace, except the tracer provider: that comes later (tracing off first).
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});

after(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
  await broker?.stop();
  trace.disable();
  propagation.disable();
  context.disable();
});

describe("tracing off (no tracer provider registered)", () => {
  for (const kind of KINDS) {
    test(`${kind}: no traceparent is added, even under a sampled active context`, async () => {
      const sub = await open(kind);
      const pub = await open(kind);
      const topic = uniqueTopic(`trace.off.${kind}`);
      const got = await handlerSubscription(sub, topic);
      await context.with(trace.setSpanContext(ROOT_CONTEXT, REMOTE), async () => {
        await pub.publish(topic, "plain");
        await pub.publish(topic, "mine", { headers: { "X-Own": "1" } });
      });
      const plain = await got.next();
      assert.equal(plain.message.headers.size, 0, `headers added: ${JSON.stringify(plain.message.headers)}`);
      const mine = await got.next();
      assert.deepEqual(mine.message.headers.toJSON(), { "X-Own": ["1"] }, "the caller's headers, nothing more");
      assert.equal(plain.active, undefined, "no span around the handler");
      assert.deepEqual(exporter.getFinishedSpans(), []);
    });
  }
});

describe("tracing on", () => {
  before(() => {
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  });

  const spansOf = (topic: string): ReadableSpan[] =>
    exporter.getFinishedSpans().filter((s) => s.attributes["messaging.destination.name"] === topic);

  for (const kind of KINDS) {
    test(`${kind}: one trace from publisher to subscriber (PRODUCER, traceparent, CONSUMER under it and linked)`, async () => {
      const sub = await open(kind);
      const pub = await open(kind);
      const topic = uniqueTopic(`trace.on.${kind}`);
      const got = await handlerSubscription(sub, topic);
      const tracer = trace.getTracer("test");
      const outer = tracer.startSpan("checkout");
      await context.with(trace.setSpan(context.active(), outer), () => pub.publish(topic, "traced payload", { headers: { "X-Own": "1" } }));
      outer.end();
      const { message, active } = await got.next();
      await until(() => spansOf(topic).length >= 2, 10_000, "the producer and consumer spans");

      const producer = spansOf(topic).find((s) => s.kind === SpanKind.PRODUCER)!;
      const consumer = spansOf(topic).find((s) => s.kind === SpanKind.CONSUMER)!;
      assert.ok(producer, "a PRODUCER span");
      assert.ok(consumer, "a CONSUMER span");
      const traceId = outer.spanContext().traceId;

      assert.equal(producer.name, `send ${topic}`);
      assert.equal(producer.spanContext().traceId, traceId, "the producer is in the caller's trace");
      assert.equal(producer.parentSpanContext?.spanId, outer.spanContext().spanId, "under the caller's active span");
      assert.deepEqual(producer.attributes, {
        "messaging.system": "herald",
        "messaging.destination.name": topic,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.message.body.size": "traced payload".length,
      });

      // The producer's context travelled in the message, beside the caller's own header.
      assert.equal(message.headers.get("traceparent"), `00-${traceId}-${producer.spanContext().spanId}-01`);
      assert.equal(message.headers.get("X-Own"), "1");
      // What an async-iterator loop would extract with the exported getter: the same context.
      const extracted = trace.getSpanContext(propagation.extract(ROOT_CONTEXT, message.headers, headersGetter));
      assert.equal(extracted?.spanId, producer.spanContext().spanId);
      assert.equal(extracted?.traceId, traceId);

      assert.equal(consumer.name, `process ${topic}`);
      assert.equal(consumer.spanContext().traceId, traceId, "one trace from publisher to subscriber");
      assert.equal(consumer.parentSpanContext?.spanId, producer.spanContext().spanId, "the consumer's parent is the producer");
      assert.equal(consumer.links.length, 1);
      assert.equal(consumer.links[0]!.context.spanId, producer.spanContext().spanId, "and it links the creation context");
      assert.deepEqual(consumer.attributes, {
        "messaging.system": "herald",
        "messaging.destination.name": topic,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.message.body.size": "traced payload".length,
        "messaging.destination.subscription.name": topic,
      });
      assert.equal(active?.spanId, consumer.spanContext().spanId, "the handler runs in the consumer span");
      // The span covered the async handler: it ended after the handler's await, not when it returned its promise.
      assert.ok(consumer.ended);
    });
  }

  test("an unsampled context injects nothing", async () => {
    const sub = await open("tcp");
    const pub = await open("tcp");
    const topic = uniqueTopic("trace.unsampled");
    const got = await handlerSubscription(sub, topic);
    // The default sampler follows a remote parent's decision: not sampled.
    const unsampled = trace.setSpanContext(ROOT_CONTEXT, { ...REMOTE, traceFlags: TraceFlags.NONE });
    await context.with(unsampled, () => pub.publish(topic, "quiet"));
    const { message } = await got.next();
    assert.equal(message.headers.has("traceparent"), false, `headers: ${JSON.stringify(message.headers)}`);
    assert.equal(message.headers.size, 0);
  });
});
