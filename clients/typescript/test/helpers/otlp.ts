/**
 * A real OTLP/HTTP receiver on loopback for tests, the Node twin of the broker tests' OtlpReceiver:
 * `POST /v1/traces` bodies (binary protobuf, as every OTLP/HTTP exporter here sends: the broker's, the .NET
 * samples', `@opentelemetry/exporter-trace-otlp-proto`) are decoded with protobufjs against the same
 * `otlp.proto` the .NET receiver is generated from, and kept as spans; `/v1/metrics` and `/v1/logs` are
 * accepted and dropped. Each export is answered 200 with an empty export response, as a collector does.
 */
import { createServer, type Server } from "node:http";
import protobuf from "protobufjs";
import { repoRoot } from "./broker.js";

/** The one OTLP schema of the repository's tests: OTLP's own message and field numbers (see its header). */
const PROTO = `${repoRoot}broker/test/Herald.Broker.Tests/Infrastructure/Otlp/otlp.proto`;

export const SpanKind = { INTERNAL: 1, SERVER: 2, CLIENT: 3, PRODUCER: 4, CONSUMER: 5 } as const;

/** One span as an exporter sent it, with the service (resource `service.name`) and scope that sent it. */
export interface ReceivedSpan {
  service: string;
  scope: string;
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  attributes: Record<string, unknown>;
  links: { traceId: string; spanId: string }[];
}

interface AnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
}
interface KeyValue {
  key: string;
  value?: AnyValue;
}
interface DecodedRequest {
  resourceSpans?: {
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: {
      scope?: { name?: string };
      spans?: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind?: number;
        attributes?: KeyValue[];
        links?: { traceId: string; spanId: string }[];
      }[];
    }[];
  }[];
}

const hex = (base64: string | undefined): string => Buffer.from(base64 ?? "", "base64").toString("hex");

function valueOf(v: AnyValue | undefined): unknown {
  if (!v) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  return v.doubleValue;
}

function attributes(list: KeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, valueOf(kv.value)]));
}

export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  /** Bodies that did not decode: a test fails on them rather than missing spans silently. */
  readonly faults: string[] = [];

  private constructor(
    private readonly server: Server,
    /** `http://127.0.0.1:port`: the OTLP base address (exporters append `/v1/traces`). */
    readonly url: string,
  ) {}

  static async start(): Promise<OtlpReceiver> {
    const root = await protobuf.load(PROTO);
    const request = root.lookupType("herald.tests.otlp.ExportTraceServiceRequest");
    let receiver: OtlpReceiver | undefined;
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        if (req.method === "POST" && req.url === "/v1/traces") {
          try {
            const decoded = request.toObject(request.decode(Buffer.concat(chunks)), { longs: String, bytes: String, enums: Number, defaults: false }) as DecodedRequest;
            receiver!.keep(decoded);
          } catch (e) {
            receiver!.faults.push(String(e));
            res.writeHead(400).end();
            return;
          }
        } else if (!(req.method === "POST" && (req.url === "/v1/metrics" || req.url === "/v1/logs"))) {
          res.writeHead(404).end();
          return;
        }
        res.writeHead(200, { "Content-Type": "application/x-protobuf" }).end(); // an empty Export*ServiceResponse
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    const port = typeof address === "object" && address ? address.port : 0;
    receiver = new OtlpReceiver(server, `http://127.0.0.1:${port}`);
    return receiver;
  }

  private keep(request: DecodedRequest): void {
    for (const resourceSpans of request.resourceSpans ?? []) {
      const service = String(attributes(resourceSpans.resource?.attributes)["service.name"] ?? "");
      for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
        for (const span of scopeSpans.spans ?? []) {
          this.spans.push({
            service,
            scope: scopeSpans.scope?.name ?? "",
            name: span.name,
            kind: span.kind ?? 0,
            traceId: hex(span.traceId),
            spanId: hex(span.spanId),
            parentSpanId: hex(span.parentSpanId),
            attributes: attributes(span.attributes),
            links: (span.links ?? []).map((l) => ({ traceId: hex(l.traceId), spanId: hex(l.spanId) })),
          });
        }
      }
    }
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
