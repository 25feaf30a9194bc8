/**
 * A scripted TCP server speaking Herald frames: it answers HELLO with a WELCOME granting the capabilities it
 * was given and PING with PONG, records every frame the client sends, and lets a test answer any frame
 * itself (`answer`) or write to a connection at any time. For what a client puts on the wire and how it takes
 * what the broker might send, without a broker.
 */
import { createServer, type Server, type Socket } from "node:net";
import { FrameReader, FrameType, decodeFrame, encodePong, encodeWelcome, type Frame } from "@herald/client/protocol";

export type FrameOf<T extends Frame["type"]> = Extract<Frame, { type: T }>;

export interface ScriptedOptions {
  /** The capabilities WELCOME grants, of those HELLO asked for (the intersection, as a broker does). */
  capabilities: number;
  /** Called for each frame after it is recorded (HELLO and PING already answered); may write to `socket`. */
  answer?: (frame: Frame, socket: Socket) => void;
}

export class ScriptedServer {
  /** Every frame received, on every connection, in order. */
  readonly received: Frame[] = [];
  /** The connections, in order of arrival. */
  readonly sockets: Socket[] = [];

  private constructor(
    private readonly server: Server,
    readonly url: string,
  ) {}

  static async start(options: ScriptedOptions): Promise<ScriptedServer> {
    let self: ScriptedServer | null = null;
    const server = createServer((socket) => {
      const me = self!;
      me.sockets.push(socket);
      const connection = me.sockets.length;
      const reader = new FrameReader();
      socket.on("data", (chunk) => {
        reader.push(new Uint8Array(chunk));
        for (let body = reader.next(); body; body = reader.next()) {
          const frame = decodeFrame(body);
          me.received.push(frame);
          if (frame.type === FrameType.Hello) {
            socket.write(encodeWelcome("scripted", connection, options.capabilities & frame.capabilities, { max_frame: 65536, max_topic: 64, ping_interval_ms: 60_000 }));
          }
          options.answer?.(frame, socket);
          if (frame.type === FrameType.Ping) socket.write(encodePong());
        }
      });
      socket.on("error", () => undefined);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    self = new ScriptedServer(server, `tcp://127.0.0.1:${(server.address() as { port: number }).port}`);
    return self;
  }

  /** The frames of one type received, in order. */
  frames<T extends Frame["type"]>(type: T): FrameOf<T>[] {
    return this.received.filter((f): f is FrameOf<T> => f.type === type);
  }

  close(): void {
    for (const socket of this.sockets) socket.destroy();
    this.server.close();
  }
}
