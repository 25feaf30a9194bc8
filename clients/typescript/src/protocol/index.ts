/**
 * `@herald/client/protocol`: the wire protocol on its own (frames, framing, topic rules, error codes),
 * for tools and tests that speak it directly.
 */
export * from "./errors.js";
export * from "./frames.js";
export * from "./topics.js";
export { MsgReader, MAX_SKIP_DEPTH } from "./reader.js";
export { zstdDecompress } from "./zstd.js";
export { applyDelta } from "./delta.js";
export { parsePollBody, type PolledMessage, type PollResult, type HeaderSource } from "./poll.js";
