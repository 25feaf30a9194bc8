// The README's example. Run the quick-start broker from the repository root
// (`dotnet run -c Release --project broker/src/Herald.Broker`), then in clients/typescript:
// `npm run build && node examples/quickstart.mjs`.
import { connect } from "@herald/client";

const TCP_URL = process.env.HERALD_TCP_URL ?? "tcp://127.0.0.1:4502"; // Node only
const HTTP_URL = process.env.HERALD_HTTP_URL ?? "http://127.0.0.1:8080"; // WebSocket, else long-poll: browsers and Node

// Two clients, one over TCP, one over the HTTP port: the same topics, the same API.
const tcp = await connect(TCP_URL, { name: "quickstart-tcp" });
const web = await connect(HTTP_URL, { name: "quickstart-web" });
console.log(`web client over ${web.info.transport}`); // "websocket" (or "longpoll", and info.fallback says why)
tcp.on("state", (state, error) => console.log(`tcp client is ${state}`, error?.message ?? ""));

// A subscription is an async iterable...
const prices = web.subscribe("prices.>");
await prices.ready; // the broker has it: whatever is published from now on reaches it

// ...or takes a callback. This one answers requests.
const echo = tcp.subscribe("service.echo", (msg) => msg.respond(`echo: ${msg.text()}`));
await echo.ready;

await tcp.publish("prices.eu.ACME", "101.5");
await tcp.publish("prices.us.ACME", JSON.stringify({ bid: 99.1, ask: 99.3 }));

let received = 0;
for await (const msg of prices) {
  console.log(`${msg.topic}: ${msg.text()}`);
  if (++received === 2) break; // leaving the loop unsubscribes
}

const reply = await web.request("service.echo", "hello", { timeoutMs: 2000 });
console.log(`reply: ${reply.text()}`);

await Promise.all([tcp.close(), web.close()]);
