/**
 * One trace per message, through the OpenTelemetry API (issue 20.3), after the OpenTelemetry messaging
 * semantic conventions:
 *
 * - `publish` (and `request`, `respond`) runs a PRODUCER span `send <topic>` and puts its W3C trace
 *   context (`traceparent`, `tracestate`: whatever propagator the application registered) into the
 *   message's headers, so the context that created the message travels with it.
 * - A subscription's handler runs inside a CONSUMER span `process <topic>` whose parent is the context
 *   extracted from the message's headers, which is also added as a link (the conventions' creation
 *   context); without one it starts from the active context.
 *
 * Nothing to configure: with no tracer provider registered the API is a no-op, and this module checks
 * that first (a few property reads, no allocation), so a message costs nothing more and gets no
 * `traceparent`. A span that is not sampled injects nothing either.
 */
import {
  ProxyTracerProvider,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  context,
  isSpanContextValid,
  propagation,
  trace,
  type Attributes,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
  type Tracer,
} from "@opentelemetry/api";
import type { MessageHeaders } from "./protocol/frames.js";
import type { HeraldHeaders } from "./headers.js";

const TRACER_NAME = "@herald/client";
const TRACER_VERSION = "0.1.0";

/** The no-op provider a proxy hands out before a real one is registered (the API's own singleton). */
const NOOP_PROVIDER = new ProxyTracerProvider().getDelegate();

/**
 * Whether an application registered a tracer provider. Asked per message (so a provider registered after
 * the client was made is used), and cheap: no span, no context, no allocation when it is not.
 */
export function tracingOn(): boolean {
  const provider = trace.getTracerProvider();
  return !(provider instanceof ProxyTracerProvider) || provider.getDelegate() !== NOOP_PROVIDER;
}

function tracer(): Tracer {
  return trace.getTracer(TRACER_NAME, TRACER_VERSION);
}

function attributes(operation: "send" | "process", topic: string, bodySize: number): Attributes {
  return {
    "messaging.system": "herald",
    "messaging.destination.name": topic,
    "messaging.operation.type": operation,
    "messaging.operation.name": operation,
    "messaging.message.body.size": bodySize,
  };
}

/** Writes into header pairs, replacing a key already there (ASCII case ignored). */
const pairSetter: TextMapSetter<MessageHeaders> = {
  set(carrier, key, value) {
    const folded = key.toLowerCase();
    const at = carrier.findIndex(([k]) => k.toLowerCase() === folded);
    if (at >= 0) carrier[at] = [carrier[at]![0], [value]];
    else carrier.push([key, [value]]);
  },
};

/**
 * Reads a message's headers for `propagation.extract`: for an async-iterator loop, which the client cannot
 * wrap in a span (`propagation.extract(context.active(), msg.headers, headersGetter)`).
 */
export const headersGetter: TextMapGetter<HeraldHeaders> = {
  keys: (carrier) => [...carrier.keys()],
  get: (carrier, key) => carrier.get(key) ?? undefined,
};

/** @internal The PRODUCER span of one publication, or `null` when tracing is off. */
export function startSend(topic: string, bodySize: number): Span | null {
  if (!tracingOn()) return null;
  return tracer().startSpan(`send ${topic}`, { kind: SpanKind.PRODUCER, attributes: attributes("send", topic, bodySize) }, context.active());
}

/**
 * @internal Injects `span`'s context into `pairs` (the caller's headers, a copy of them, or a new list);
 * returns false, touching nothing, when the span is not valid and sampled.
 */
export function injectTrace(span: Span, pairs: MessageHeaders): boolean {
  const sc = span.spanContext();
  if (!isSpanContextValid(sc) || (sc.traceFlags & TraceFlags.SAMPLED) === 0) return false;
  propagation.inject(trace.setSpan(context.active(), span), pairs, pairSetter);
  return true;
}

/** @internal Ends a PRODUCER span when its publication settles. */
export function endSend(span: Span, sent: Promise<void>): void {
  sent.then(
    () => span.end(),
    (e: unknown) => {
      failed(span, e);
      span.end();
    },
  );
}

function failed(span: Span, e: unknown): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message: (e as Error)?.message ?? String(e) });
  if (e instanceof Error) span.recordException(e);
}

/**
 * @internal Runs a subscription's handler for `message` in a CONSUMER span (when tracing is on); the span
 * ends when the handler returns, or when the promise it returns settles.
 */
export function processTraced<M extends { readonly topic: string; readonly payload: Uint8Array; readonly headers: HeraldHeaders }, R>(
  message: M,
  pattern: string,
  handler: (message: M) => R,
): R {
  if (!tracingOn()) return handler(message);
  const active = context.active();
  const parent = message.headers.size > 0 ? propagation.extract(active, message.headers, headersGetter) : active;
  const creation = parent === active ? undefined : trace.getSpanContext(parent);
  const span = tracer().startSpan(
    `process ${message.topic}`,
    {
      kind: SpanKind.CONSUMER,
      attributes: { ...attributes("process", message.topic, message.payload.length), "messaging.destination.subscription.name": pattern },
      ...(creation !== undefined && isSpanContextValid(creation) ? { links: [{ context: creation }] } : {}),
    },
    parent,
  );
  let result: R;
  try {
    result = context.with(trace.setSpan(parent, span), handler, undefined, message);
  } catch (e) {
    failed(span, e);
    span.end();
    throw e;
  }
  if (result && typeof (result as { then?: unknown }).then === "function") {
    (result as unknown as Promise<unknown>).then(
      () => span.end(),
      (e: unknown) => {
        failed(span, e);
        span.end();
      },
    );
  } else {
    span.end();
  }
  return result;
}
