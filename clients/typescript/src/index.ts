/**
 * Herald client for TypeScript and JavaScript: TCP (Node), WebSocket and HTTP long-poll (browsers and Node).
 *
 * ```ts
 * import { connect } from "@herald/client";
 * const client = await connect("tcp://127.0.0.1:4502");      // or tls://, ws://, wss://, http://, https://
 * const sub = client.subscribe("chat.>");
 * await client.publish("chat.room1", "hello");
 * for await (const msg of sub) console.log(msg.topic, msg.text());
 * ```
 */
export { connect, createClient, HeraldClient } from "./client.js";
export type { ConnectionState, ConnectOptions, PublishOptions, RequestOptions, ClientEvents, Payload, TransportChoice } from "./client.js";
export { Message, Subscription } from "./subscription.js";
export { HeraldHeaders } from "./headers.js";
export type { HeadersInit } from "./headers.js";
export { headersGetter } from "./tracing.js";
export type { MessageHandler, SubscribeOptions } from "./subscription.js";
export type { ResumeEvent } from "./history.js";
export { PresenceError } from "./presence.js";
export type { Occupancy, PresenceEntry, PresenceEvent, PresenceEventKind, PresenceLeaveReason, PresenceOptions, PresencePage } from "./presence.js";
export type { HistoryPosition } from "./protocol/frames.js";
export type { TransportInfo } from "./transport.js";
export { HeraldError, ProtocolError, NoRespondersError, RequestTimeoutError, ErrorCode, errorCodeName } from "./protocol/errors.js";
export { validateTopic, validatePattern, topicMatches, isReservedTopic, isValidQueueName } from "./protocol/topics.js";
