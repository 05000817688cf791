// A webhook route's request as Fastify hooks: the port through which the request pipeline
// (../receiver/pipeline.ts) reads a route's preParsing hook, the route's last. The pipeline reads
// the exact raw bytes from the hook's payload stream, verifies and claims them; an accepted
// delivery is recorded on the request and Fastify is let go on, skipping body parsing for the
// request (no content-type parser of the app runs on a delivery, and none is needed), to the
// route's hooks and handler, whose answer settles the claim (onSend). The request's headers are
// never changed. Registration is in ./plugin.ts.
import { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { VerificationError } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import { readPayload } from '../receiver/node/read-stream.js'
import { answerDelivery, refusal, settle, type AcceptedOutcome, type EventAnswer, type WebhookPipeline, type WebhookPort } from '../receiver/index.js'
import type { Reply } from '../receiver/reply.js'

/** The verified events of the request (a request decoration; null until verified). */
export const kEvents = Symbol('mailchannels-webhooks.events')
/** The accepted outcome whose claim the handler's answer settles (a request decoration; null until verified). */
export const kAccepted = Symbol('mailchannels-webhooks.accepted')

/** One webhook route: its pipeline (options resolved once) and, when the plugin answers it, the answer. */
export interface RouteState {
  readonly pipeline: WebhookPipeline<Delivery, void>
  readonly answer: EventAnswer | null
}

type WebhookRequest = FastifyRequest & { [kEvents]: WebhookEvent[] | null, [kAccepted]: AcceptedOutcome | null }
type Done = (err?: Error | null, payload?: never) => void

/**
 * One request in a route's preParsing hook. `early`: a route declared before the plugin loaded,
 * verified by a scope hook (./plugin.ts), whose handler the plugin could not replace.
 */
export interface Delivery {
  readonly request: FastifyRequest
  readonly reply: FastifyReply
  readonly payload: Readable
  readonly done: Done
  readonly route: RouteState
  readonly early: boolean
}

/** The verified events of a request, or `undefined` when it was not a verified delivery (never throws). */
export function webhookEventsOf (request: FastifyRequest): WebhookEvent[] | undefined {
  return (request as Partial<WebhookRequest>)[kEvents] ?? undefined
}

/** Sends a pipeline reply (a refusal, a duplicate, an answer); the handler does not run. */
function send (reply: FastifyReply, r: Reply): void {
  reply.code(r.status).headers(r.headers).send(r.body)
}

/** Refuses a request with `err` (logged, in the webhook error shape); the handler does not run. */
export function refuse (request: FastifyRequest, reply: FastifyReply, err: unknown): void {
  send(reply, refusal(err, request.headers, request.log))
}

/**
 * Fastify's port: the preParsing hook's payload stream is the body; an accepted delivery is
 * recorded on the request (`request.body` the raw bytes, `request.webhookEvents` the events) and
 * Fastify is told the body is already read (see `hideBodyFromParser`), so it runs the route's
 * hooks and handler: the app's, or the plugin's answer of `handlers` / `enqueue` (`answers`:
 * after the route's own hooks). An early route's `handlers` / `enqueue` are answered here.
 */
export const FASTIFY_PORT: WebhookPort<Delivery, void> = {
  headers: (d) => d.request.headers,
  log: (d) => d.request.log,
  readBody: readPayload,
  reply: (d, r) => { send(d.reply, r) },
  answers: true,
  run (d, outcome) {
    const { request, reply, route } = d
    const r = request as WebhookRequest
    r.body = outcome.body
    r[kAccepted] = outcome
    r[kEvents] = outcome.events
    if (d.early && route.answer !== null) {
      // answerDelivery never rejects and settles the claim itself.
      void answerDelivery(route.answer, outcome, request.log).then((answered) => { send(reply, answered) })
      return
    }
    if (reply.sent) return
    hideBodyFromParser(request)
    // An early route's own preParsing hooks, declared before the plugin loaded, run after this
    // one. One that reads request.headers takes the one read meant for Fastify, which then
    // parses: it is handed the verified bytes, never the socket's (already read) stream.
    if (d.early) d.done(null, Readable.from([outcome.body]) as never)
    else d.done()
  },
}

/** What Fastify's body check reads in place of the request's headers, once: no Content-Type, no length. */
const NO_BODY: Readonly<Record<string, undefined>> = Object.freeze({})

/**
 * Fastify runs a content-type parser after the last preParsing hook unless the request has
 * neither `Content-Type` nor a body length: it reads `request.headers` once, right then
 * (lib/handle-request.js in https://github.com/fastify/fastify). The body is already read and
 * verified here, so that one read, and only it, is answered by an own property of the request
 * that removes itself as it is read and returns a view without a body: no parser runs, and a
 * delivery is never parsed twice. Every other reader, before or after (the app's hooks, its
 * error handler, the access log, the handler), sees the request's own headers, which are never
 * changed. This hook is the route's last preParsing hook (see `pinLast` in ./plugin.ts), so the
 * next read is Fastify's. (Removing the property puts the request back on the shape of every
 * other request; a view merged through the public `request.headers` setter instead, with an
 * accessor in it to restore the previous value, cost several times more per delivery.)
 */
function hideBodyFromParser (request: FastifyRequest): void {
  Object.defineProperty(request, 'headers', { configurable: true, enumerable: false, get: readOnce, set: writeThrough })
}

function readOnce (this: FastifyRequest): unknown {
  delete (this as { headers?: unknown }).headers
  return NO_BODY
}

function writeThrough (this: FastifyRequest, headers: unknown): void {
  delete (this as { headers?: unknown }).headers
  ;(this as { headers: unknown }).headers = headers
}

/** The preParsing step of a webhook route: one request through the route's pipeline. */
export function receiveDelivery (route: RouteState, request: FastifyRequest, reply: FastifyReply, payload: Delivery['payload'], done: Done, early: boolean): void {
  const handled = route.pipeline.handle({ request, reply, payload, done, route, early })
  if (handled instanceof Promise) {
    handled.catch((err: unknown) => { request.log.error({ err }, 'mailchannels webhook: failed after verification') })
  }
}

/** onSend of a webhook route: the handler's answer, whatever the socket's state, settles the claim. */
export function settleOnSend (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void): void {
  const accepted = (request as WebhookRequest)[kAccepted]
  // A fetch Response payload carries its own status, applied after the onSend hooks.
  if (accepted !== null && accepted !== undefined) settle(accepted, payload instanceof Response ? payload.status : reply.statusCode)
  done(null, payload)
}

/** The handler of a route the plugin answers (`handlers` or `enqueue`): dispatches or enqueues the verified events; never throws. */
export function answerHandler (answer: EventAnswer): (request: FastifyRequest, reply: FastifyReply) => Promise<unknown> {
  return async function answerMailChannelsDelivery (request, reply) {
    const accepted = (request as WebhookRequest)[kAccepted]
    if (accepted === null) throw new VerificationError('configuration_error', 'The delivery was not verified.')
    const answered = await answerDelivery(answer, accepted, request.log)
    reply.code(answered.status).headers(answered.headers)
    return answered.body
  }
}
