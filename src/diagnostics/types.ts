// What the receivers and the key store publish for metrics and tracing: the channel names, the
// message types, and the port that publishes them (`#diagnostics`: node:diagnostics_channel on
// Node, nothing elsewhere). Runtime-neutral: no node: import.
import type { VerifyErrorType } from '../errors.js'

/**
 * The `node:diagnostics_channel` channel of one `WebhookDeliveryMessage` per delivery, published
 * when its outcome is known: a rejected or duplicate delivery when it is refused, an accepted one
 * when its handler has answered.
 */
export const DELIVERY_DIAGNOSTICS_CHANNEL = 'mailchannels-webhooks:delivery'

/** The `node:diagnostics_channel` channel of one `KeyFetchMessage` per request to the public-key endpoint. */
export const KEY_FETCH_DIAGNOSTICS_CHANNEL = 'mailchannels-webhooks:key-fetch'

/**
 * The name of the `TracingChannel` around each delivery (`diagnostics_channel.tracingChannel(RECEIVE_TRACING_CHANNEL)`,
 * that is the channels `tracing:mailchannels-webhooks:receive:start`, `:end`, `:asyncStart` and
 * `:asyncEnd`), with a `WebhookReceiveContext`. `start` when the receiver has the whole body
 * (or refuses the request before reading it), `end` when it has handed its decision to the
 * adapter, `asyncStart` and `asyncEnd` when the delivery's outcome is known (`context.result`),
 * which may be right after `end`. A span starts at `start` and ends at `asyncEnd`. There is no
 * `error` event: the receiver never throws, a refused delivery is an outcome.
 */
export const RECEIVE_TRACING_CHANNEL = 'mailchannels-webhooks:receive'

/**
 * How a delivery ended:
 * - `accepted`: verified, and the handler (or the router, or the queue) answered 2xx;
 * - `duplicate`: an exact resend of a delivery already handled or in progress, answered
 *   `200 { duplicate: true }` without running the handler;
 * - `rejected`: refused before the handler (transport, verification, signing key, replay store: `type` says which);
 * - `failed`: verified, but the handler answered another status (`type` is `handler_error`, or
 *   the code the receiver answered with, such as `event_in_progress` or `queue_unavailable`).
 */
export type WebhookDeliveryOutcome = 'accepted' | 'duplicate' | 'rejected' | 'failed'

/** Why a delivery was not accepted: a verification reason code, or what its handler's answer said. */
export type WebhookDeliveryErrorType = VerifyErrorType | 'handler_error' | 'event_in_progress' | 'queue_unavailable'

/** One delivery, as published on `DELIVERY_DIAGNOSTICS_CHANNEL` (and as `result` of the receive trace). Read-only. */
export interface WebhookDeliveryMessage {
  readonly outcome: WebhookDeliveryOutcome
  /** Why, for `rejected` and `failed`; null for `accepted` and `duplicate`. */
  readonly type: WebhookDeliveryErrorType | null
  /** The HTTP status answered (the handler's own for `accepted` and `failed`). */
  readonly status: number
  /** Events in the delivery; 0 when it was not verified. */
  readonly eventCount: number
  /** Bytes of the body; 0 when the request was refused before its body was read. */
  readonly bodyBytes: number
  /** The key id the delivery was verified with; null when it was not verified (a rejected delivery's key id is the sender's claim, not a fact). */
  readonly keyId: string | null
  /** Milliseconds from the whole body in hand to the receiver's decision: verification (with a key fetch, if one was needed) and the replay claim. */
  readonly verifyDurationMs: number
  /** Milliseconds from the receiver's decision to the handler's answer; 0 unless `accepted` or `failed`. */
  readonly handlerDurationMs: number
}

/** The context object of the receive trace (`RECEIVE_TRACING_CHANNEL`): one per delivery, the same object at every event. */
export interface WebhookReceiveContext {
  /** Bytes of the body (0 when the request is refused before its body is read). */
  readonly bodyBytes: number
  /** The delivery's outcome, set from `asyncStart` on. */
  result?: WebhookDeliveryMessage
}

/** Why a key fetch failed, as logged (`cause`) and published (`KeyFetchMessage.cause`). */
export type KeyFetchCause =
  | 'timeout'
  | 'dns'
  | 'connection_refused'
  | 'connection_reset'
  | 'tls'
  | 'network'
  | 'aborted'
  | 'redirect'
  | 'not_found'
  | 'http_status'
  | 'too_large'
  | 'invalid_response'
  | 'invalid_key'

/**
 * How a key fetch ended: `fetched` (a valid key was served), `unknown_key` (the endpoint does not
 * know the key id), `failed` (anything else: `cause` says what).
 */
export type KeyFetchOutcome = 'fetched' | 'unknown_key' | 'failed'

/** One request to the public-key endpoint, as published on `KEY_FETCH_DIAGNOSTICS_CHANNEL`. Read-only. */
export interface KeyFetchMessage {
  readonly outcome: KeyFetchOutcome
  readonly keyId: string
  /** Where the key was fetched from (the key store's base URL). */
  readonly baseUrl: string
  /** True when a cached key was fetched again after a signature failed with it (a possible rotation). */
  readonly refresh: boolean
  /** Why it did not succeed (`timeout`, `dns`, `not_found`, `http_status`, `invalid_key`...); null when fetched. */
  readonly cause: KeyFetchCause | null
  /** The endpoint's HTTP status when it answered one; null otherwise. */
  readonly status: number | null
  /** Milliseconds the fetch took. */
  readonly durationMs: number
}

/** A channel as the library uses it. */
export interface Publisher<M> {
  readonly hasSubscribers: boolean
  publish (message: M): void
}

/** A `TracingChannel` as the library uses it (no `error`: the traced work never throws). */
export interface TracingPublisher<C> {
  readonly hasSubscribers: boolean
  readonly start: Publisher<C>
  readonly end: Publisher<C>
  readonly asyncStart: Publisher<C>
  readonly asyncEnd: Publisher<C>
}

/**
 * What `#diagnostics` provides: `node.ts` on Node (node:diagnostics_channel), `none.ts`
 * everywhere else (nobody can subscribe, so nothing is ever measured or built).
 */
export interface DiagnosticsPort {
  readonly delivery: Publisher<WebhookDeliveryMessage>
  readonly keyFetch: Publisher<KeyFetchMessage>
  readonly receive: TracingPublisher<WebhookReceiveContext>
  /** A monotonic clock in milliseconds; read only when someone subscribes. */
  now (): number
  /**
   * Why a `fetch()` rejected, from what the runtime's error carries (Node's system error codes),
   * else 'network'; with the log's wording when only the port can say it (dns, tls...).
   */
  networkCause (err: unknown): [KeyFetchCause, string?]
  /** Publishes how a key fetch that started at `startedAt` ended (`err` null: a key was served). */
  keyFetchEnded (startedAt: number, keyId: string, baseUrl: string, refresh: boolean, err: unknown): void
}
