import type { ClientEvents, HeraldClient, Message, Subscription } from "@herald/client";

/** Rejects after `ms` with a message naming what was awaited. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout>;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** The next message of an iterable subscription, within `ms`. */
export async function nextMessage(sub: Subscription, ms = 5000): Promise<Message> {
  const message = await within(sub.next(), ms, `a message on '${sub.pattern}'`);
  if (!message) throw new Error(`Subscription '${sub.pattern}' ended`);
  return message;
}

/** `n` messages of an iterable subscription, within `ms`. */
export async function take(sub: Subscription, n: number, ms = 10_000): Promise<Message[]> {
  const out: Message[] = [];
  const all = (async () => {
    while (out.length < n) out.push(await nextMessage(sub, ms));
    return out;
  })();
  return within(all, ms, `${n} messages on '${sub.pattern}' (got ${out.length})`);
}

/** Resolves at the next `event` of `client`. */
export function once<E extends keyof ClientEvents>(client: HeraldClient, event: E, ms = 30_000): Promise<Parameters<ClientEvents[E]>> {
  return within(
    new Promise<Parameters<ClientEvents[E]>>((resolve) => {
      const off = client.on(event, ((...args: Parameters<ClientEvents[E]>) => {
        off();
        resolve(args);
      }) as ClientEvents[E]);
    }),
    ms,
    `the '${event}' event`,
  );
}

/** Resolves when `client.state` is `state`. */
export function stateIs(client: HeraldClient, state: HeraldClient["state"], ms = 30_000): Promise<void> {
  if (client.state === state) return Promise.resolve();
  return within(
    new Promise<void>((resolve) => {
      const off = client.on("state", (s) => {
        if (s === state) {
          off();
          resolve();
        }
      });
    }),
    ms,
    `state '${state}'`,
  );
}

/**
 * Resolves once `condition()` holds, checked every 10 ms; rejects after `ms`. For something that must
 * happen: the bound only turns a hang into a failure, it measures nothing.
 */
export async function until(condition: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`Timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export const delay = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A topic no other test uses. */
let counter = 0;
export function uniqueTopic(prefix: string): string {
  return `${prefix}.${process.pid}.${Date.now().toString(36)}.${++counter}`;
}
