import type { WebhookEvent } from '../../events/types.js'
import type { Logger } from '../../logger.js'
import type { SignedWebhook, WireEvent } from '../sign-webhook.js'
import type { EndpointAnswer } from './answer.js'
import type { SandboxBatch } from './batch-query.js'
import type { SandboxResend, SandboxValidation, TamperKind } from './routes.js'

// What a user of `createSandbox` sees: its options, the sandbox and the records it keeps.

/** Options of `createSandbox`. Validated once; a bad value throws a TypeError naming the option. */
export interface SandboxOptions {
  /**
   * The first enrolled endpoint, where deliveries are POSTed: an `http:` URL on a loopback
   * host, or an `https:` URL. More endpoints can be enrolled later (`enroll`, or
   * `POST /tx/v1/webhook?endpoint=` on the sandbox's API).
   * @default none (enroll one later, or give `deliver` a target)
   */
  target?: string | URL
  /**
   * Port of the sandbox's API server on 127.0.0.1. The server answers only requests whose
   * `Host` is a loopback name (127.0.0.0/8, `localhost`, `[::1]`), so a web page cannot reach
   * it through DNS rebinding.
   * @default 0 (any free port)
   */
  port?: number
  /**
   * Deliveries per second of the periodic sender (`start()`), up to 100.
   * @default 1
   */
  rate?: number
  /**
   * Events per delivery when `deliver` is given none, 1 to 1000.
   * @default 10 (one of each type)
   */
  batchSize?: number
  /**
   * The `customer_handle` of generated events and recorded batches.
   * @default "sandbox"
   */
  customerHandle?: string
  /**
   * The `X-Api-Key` the sandbox's API requires (not the public-key endpoint).
   * @default a random key for each sandbox (read it from `sandbox.apiKey`)
   */
  apiKey?: string
  /**
   * Time limit of one POST, ms; past it the attempt is `no_response`.
   * @default 10000
   */
  deliveryTimeout?: number
  /**
   * Attempts per delivery, including the first; a failed one (non-2xx or no response) is retried
   * after a backoff, signed afresh with a later `created` (a new signature).
   * @default 3
   */
  maxAttempts?: number
  /**
   * Wait before the first retry, ms; it doubles for each further retry.
   * @default 1000
   */
  retryDelay?: number
  /**
   * Make every n-th periodic delivery a tampered one (cycling body, signature, expired), not retried.
   * @default 0 (never)
   */
  tamperEvery?: number
  /**
   * How many signing keys the public-key endpoint serves: the current one and the most recent
   * ones before it, so deliveries signed just before a rotation still verify. A rotation past
   * this drops the oldest key (its id then answers 404). 1 to 100.
   * @default 5
   */
  maxKeys?: number
  /**
   * Periodic deliveries allowed in flight at once; a tick past it is skipped.
   * @default 4
   */
  maxInFlight?: number
  /**
   * Called after each attempt is recorded (resends included; validation requests are not recorded).
   * @default none
   */
  onAttempt?: (batch: SandboxBatch, detail: AttemptDetail) => void
  /**
   * Where the sandbox logs (object first, message second).
   * @default silent
   */
  logger?: Logger
}

/** More about a recorded attempt than the listing shows. */
export interface AttemptDetail {
  /** 1 for the first POST of a delivery. */
  attempt: number
  /** Whether another attempt will follow. */
  willRetry: boolean
  /** When another attempt follows: the wait before it, ms; otherwise `null`. */
  retryInMs: number | null
  tamper: TamperKind | null
  /** Why there was no response, when there was none. */
  error: string | null
  /** True for an attempt made by a resend request (`resend` or the API's resend route). */
  resend: boolean
  /**
   * The error code and message the endpoint gave in a JSON answer (e.g. this library's
   * `{ "code": "key_unavailable", "message": ... }`); `null` when it answered none. Raw text from
   * the endpoint: escape it before printing.
   */
  answer: EndpointAnswer | null
}

/** Options of one `deliver` call. */
export interface DeliverOptions {
  /**
   * Where this delivery goes instead of the sandbox's `target`.
   * @default the sandbox's `target`
   */
  target?: string | URL
  /**
   * Spoil this delivery on purpose (it is then not retried).
   * @default none
   */
  tamper?: TamperKind
  /**
   * Attempts for this delivery, including the first, 1 to 10 (1: no retry).
   * @default the sandbox's `maxAttempts`
   */
  maxAttempts?: number
}

/** Requests the sandbox's API server has answered, by endpoint. */
export interface SandboxStats {
  publicKeyRequests: number
  batchListRequests: number
  /** POSTs of batches made to endpoints (every attempt, resends included). */
  attempts: number
  /** Signed `test` events sent by validation requests (one per endpoint). */
  validations: number
  /** Resend requests served. */
  resends: number
}

/** Options of `Sandbox.start`. */
export interface StartOptions {
  /**
   * Enrolls this endpoint first (if it is not enrolled yet).
   * @default the endpoints already enrolled
   */
  target?: string | URL
  /**
   * Send exactly this many events in all, then stop sending by itself (`finished()` resolves
   * once the last delivery is settled; the API keeps serving until `close()`). The last delivery carries what is left when `count` is not a
   * multiple of `batchSize`.
   * @default no limit (until `stop()` or `close()`)
   */
  count?: number
}

/** A local stand-in for MailChannels: signs and delivers webhooks, serves its keys, the batch listing and the webhook lifecycle. */
export interface Sandbox {
  /** Origin of the API server, e.g. `http://127.0.0.1:39123`: pass it as `baseUrl` to the verifier and the client. */
  readonly baseUrl: string
  /** Current signing key, base64 SPKI DER as the key endpoint serves it. */
  readonly publicKey: string
  /**
   * Current keyid: random for each sandbox and each rotation (`sandbox-` and 16 hex digits), so a
   * receiver that cached the key of an earlier run fetches the new key at once instead of
   * rejecting deliveries signed with it.
   */
  readonly keyId: string
  /**
   * The `X-Api-Key` the sandbox API requires: the `apiKey` option, or a random key for this
   * sandbox. Not enumerable, so it stays out of `util.inspect(sandbox)` output and JSON.
   */
  readonly apiKey: string
  /**
   * The inspector page of this sandbox, with the API key in the fragment
   * (`http://127.0.0.1:39123/#key=…`): open it in a browser on this machine to see every
   * attempt, its headers, body, signature base and the receiver's answer, and to send batches.
   * The fragment never leaves the browser; the page keeps the key for the tab and removes it
   * from the address bar. Not enumerable, like `apiKey`.
   */
  readonly inspectorUrl: string
  readonly customerHandle: string
  /** The first enrolled endpoint: where `deliver` sends by default (`null` while none is enrolled). */
  readonly target: string | null
  /** The enrolled endpoints, in enrolment order: the periodic sender delivers each batch to every one. */
  readonly endpoints: readonly string[]
  /**
   * Every attempt so far, oldest first, as the listing returns them. The retries of a delivery
   * keep its `batch_id`, so a delivery retried twice shows as three rows with one `batch_id`;
   * a resend adds a row with the batch's `batch_id` too.
   */
  readonly batches: readonly SandboxBatch[]
  readonly stats: Readonly<SandboxStats>
  /**
   * Enrolls an endpoint (as `POST /tx/v1/webhook?endpoint=` does): `https:`, or `http:` on a
   * loopback host. Returns false when it was already enrolled. Throws a TypeError for a bad URL
   * or past 10 endpoints.
   */
  enroll (endpoint: string | URL): boolean
  /** Removes every enrolled endpoint (as `DELETE /tx/v1/webhook` does). The periodic sender idles until one is enrolled. */
  removeEndpoints (): void
  /**
   * Sends a signed `test` event (its `request_id` is `requestId`, or a new one) to each enrolled
   * endpoint and reports what each answered, as `POST /tx/v1/webhook/validate` does. Not
   * recorded as batches. With no endpoint enrolled, `results` is empty.
   */
  validate (requestId?: string): Promise<SandboxValidation>
  /**
   * Delivers a recorded batch again, signed afresh with the current key, to the endpoint it was
   * sent to, in one attempt, and records that attempt under the batch's `batch_id` (as
   * `POST /tx/v1/webhook-batch/{id}/resend` does). Resolves `null` for an unknown batch, or one
   * older than the last 100,000 events the sandbox keeps.
   */
  resend (batchId: number): Promise<SandboxResend | null>
  /**
   * Switches to a new signing key with a new random keyid. The previous keys stay served (up to
   * `maxKeys` in all) so deliveries signed before the rotation still verify.
   */
  rotateKey (): { keyId: string, publicKey: string }
  /** Signs events with the current key (fresh `created`). */
  sign (events: ReadonlyArray<WebhookEvent | WireEvent>): SignedWebhook
  /**
   * One delivery (a batch) with retries, to `options.target` or else the first enrolled
   * endpoint; resolves with the last attempt's record. Without `events`, `batchSize` sample
   * events. Rejects if the sandbox closes meanwhile.
   */
  deliver (events?: ReadonlyArray<WebhookEvent | WireEvent>, options?: DeliverOptions): Promise<SandboxBatch>
  /**
   * Starts the periodic sender (`rate` ticks per second): each tick makes a batch and delivers
   * it to every enrolled endpoint (one `batch_id` per endpoint). While no endpoint is enrolled
   * the ticks send nothing and use up no `count`. `target` (optional) enrolls an endpoint
   * first: handy when the receiver listens on a port chosen after the sandbox started.
   * `count` (optional) stops it after exactly that many events.
   */
  start (options?: StartOptions): void
  /** Stops the periodic sender and waits for its deliveries in flight. */
  stop (): Promise<void>
  /**
   * Resolves once the periodic sender has stopped (its `count` reached, `stop()` or `close()`)
   * and its deliveries, retries included, are settled. Resolves at once when it is not running.
   */
  finished (): Promise<void>
  /** Stops everything, aborts deliveries in flight, closes the server and its keep-alive sockets. */
  close (): Promise<void>
}
