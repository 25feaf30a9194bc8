/**
 * A loss the broker could not prevent, told by subscription (spec README §4.8, §6.3; cluster.md §13): a non-fatal
 * `MessagesDropped` with count 0 and `sids` names the subscriptions that may have lost messages (a cluster's Redis shard
 * was unreachable). Against a scripted TCP server: each named subscription gets a resume event that did not recover,
 * the others nothing; none ends, the connection stays, and no `error` event is raised for it.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { type ConnectOptions, type HeraldClient, type ResumeEvent } from "@herald/client";
import { Capabilities, ErrorCode, FrameType, encodeError, encodeMessage } from "@herald/client/protocol";
import { OpenClients } from "./helpers/clients.js";
import { ScriptedServer } from "./helpers/scripted.js";
import { until } from "./helpers/wait.js";

const clients = new OpenClients();
const open = (url: string, options: ConnectOptions = {}): Promise<HeraldClient> => clients.open(url, options);
after(() => clients.closeAll());

describe("a loss notice naming sids (scripted server)", () => {
  test("each named subscription is told as a resume that did not recover; the others are not; nothing ends", async () => {
    const server = await ScriptedServer.start({ capabilities: Capabilities.Headers });
    try {
      const client = await open(server.url);
      const errors: unknown[] = [];
      client.on("error", (e) => errors.push(e));
      const clientResumes: ResumeEvent[] = [];
      client.on("resume", (e) => clientResumes.push(e));
      const told: ResumeEvent[] = [];
      const untold: ResumeEvent[] = [];
      const victim = client.subscribe("orders.1", () => undefined, { onResume: (e) => void told.push(e) });
      const bystander = client.subscribe("audit", () => undefined, { onResume: (e) => void untold.push(e) });
      const received: string[] = [];
      const glob = client.subscribe("orders.>", (m) => void received.push(m.text()), { onResume: (e) => void told.push(e) });
      await Promise.all([victim.ready, bystander.ready, glob.ready]);
      const sids = new Map(server.frames(FrameType.Subscribe).map((s) => [s.pattern, s.sid]));
      const named = [sids.get("orders.1")!, sids.get("orders.>")!].sort((a, b) => a - b);

      server.sockets[0]!.write(encodeError(ErrorCode.MessagesDropped, false, "May have lost messages.", 0, 0, named));
      server.sockets[0]!.write(encodeMessage(sids.get("orders.>")!, "orders.2", null, 0, new TextEncoder().encode("after"))); // after the notice, on the same connection

      await until(() => received.length > 0, 5000, "the message after the notice (read after it, in order)");
      assert.deepEqual(told.map((e) => e.subscription).sort((a, b) => a.sid - b.sid), [victim, glob].sort((a, b) => a.sid - b.sid));
      assert.ok(told.every((e) => !e.recovered), "told as a resume that did not recover");
      assert.deepEqual(untold, [], "the subscription not named is told nothing");
      assert.deepEqual(clientResumes.length, 2, "the client's resume event reports the same");
      assert.deepEqual(errors, [], "no error event: the notice is the subscriptions'");
      assert.equal(victim.isClosed || glob.isClosed || bystander.isClosed, false, "no subscription ends");
      assert.equal(client.state, "connected");
      assert.deepEqual(received, ["after"]);
    } finally {
      server.close();
    }
  });
});
