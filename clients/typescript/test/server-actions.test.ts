/**
 * What the client does when the application's backend acts on it through the server API (README §6.4, §8),
 * against a scripted TCP server: a fatal `Disconnected` or `Revoked` closes the client with the broker's reason and
 * it does not reconnect; a non-fatal `Unsubscribed` naming a sid ends that subscription and the connection stays.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { type ConnectOptions, type HeraldClient, type HeraldError, type Subscription } from "@herald/client";
import { Capabilities, ErrorCode, FrameType, encodeError, encodeSubscribed } from "@herald/client/protocol";
import { OpenClients } from "./helpers/clients.js";
import { ScriptedServer } from "./helpers/scripted.js";
import { within } from "./helpers/wait.js";

const clients = new OpenClients();
const open = (url: string, options: ConnectOptions = {}): Promise<HeraldClient> => clients.open(url, options);
after(() => clients.closeAll());

describe("the backend's actions on a client (scripted server)", () => {
  for (const [code, reason] of [
    ["Disconnected", "Banned for spam."],
    ["Revoked", "'alice' is revoked until 2026-12-01T00:00:00Z: account suspended"],
  ] as const) {
    test(`a fatal ${code} closes the client with the reason and it does not reconnect`, async () => {
      const server = await ScriptedServer.start({ capabilities: Capabilities.Headers });
      try {
        const client = await open(server.url, { reconnectDelayMs: 1 });
        const states: string[] = [];
        let closedWith: HeraldError | undefined;
        client.on("state", (state, error) => {
          states.push(state);
          if (state === "closed") closedWith = error as HeraldError;
        });

        server.sockets[0]!.end(encodeError(ErrorCode[code], true, reason)); // the broker writes nothing after a fatal ERROR

        await within(client.closed, 5000, "the client to close");
        assert.equal(closedWith?.code, code);
        assert.equal(closedWith?.fatal, true);
        assert.match(closedWith!.message, new RegExp(reason.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")));
        assert.deepEqual(states, ["closed"], "closed at once: no reconnect was tried");
        assert.equal(server.sockets.length, 1, "no second connection");
      } finally {
        server.close();
      }
    });
  }

  test("a non-fatal Unsubscribed naming a sid ends that subscription with the reason; the connection stays", async () => {
    const server = await ScriptedServer.start({ capabilities: Capabilities.Headers });
    try {
      const client = await open(server.url);
      const sub = client.subscribe("room.1");
      await sub.ready;
      const sid = server.frames(FrameType.Subscribe)[0]!.sid;
      const ended = new Promise<HeraldError>((resolve) => client.on("error", (e) => resolve(e as HeraldError)));

      server.sockets[0]!.write(encodeError(ErrorCode.Unsubscribed, false, "Moved to another room.", 0, sid));

      const error = await within(ended, 5000, "the subscription to end");
      assert.equal(error.code, "Unsubscribed");
      assert.equal(error.sid, sid);
      assert.match(error.message, /Moved to another room\./);
      assert.equal(sub.isClosed, true);
      assert.equal(client.state, "connected");
    } finally {
      server.close();
    }
  });
  test("a subscription the server made ends with its connection and is not made again on the reconnect", async () => {
    const server = await ScriptedServer.start({ capabilities: Capabilities.Headers | Capabilities.ServerSubscriptions });
    try {
      const client = await open(server.url, { acceptServerSubscriptions: true, reconnectDelayMs: 1 });
      assert.equal(server.frames(FrameType.Hello)[0]!.capabilities & Capabilities.ServerSubscriptions, Capabilities.ServerSubscriptions);
      const raised = new Promise<Subscription>((resolve) => client.on("serverSubscribed", resolve));
      const own = client.subscribe("own");
      await own.ready;
      server.sockets[0]!.write(encodeSubscribed(0x80000001, "news"));
      const made = await within(raised, 5000, "the serverSubscribed event");
      assert.deepEqual([made.sid, made.pattern], [0x80000001, "news"]);

      const reconnected = new Promise<void>((resolve) => client.on("reconnect", resolve));
      server.sockets[0]!.destroy();
      await within(reconnected, 5000, "the reconnect");
      await client.flush();

      assert.deepEqual(server.frames(FrameType.Subscribe).map((f) => f.pattern), ["own", "own"], "only the client's own subscription is made again");
      assert.equal(made.isClosed, true);
      assert.equal(own.isClosed, false);
    } finally {
      server.close();
    }
  });
});
