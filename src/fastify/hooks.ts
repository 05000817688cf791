// The request flow of a webhook route as Fastify hooks: one preParsing hook, the route's last,
// reads the exact raw bytes itself, verifies and claims them (the receiver in ../receiver/), then
// lets Fastify skip body parsing for the request, so no content-type parser of the app runs on a
// delivery and none is needed; the handler's answer settles the claim (onSend). The request's
// headers are never changed. Registration is in ./plugin.ts.
import type { FastifyReply, FastifyRequest } from 'fastify'
import { VerificationError } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import { answerDelivery, rejection, settle, type AcceptedOutcome, type Receiver } from '../receiver/index.js'
import { readStream } from '../receiver/node/read-stream.js'
import { Readable } from 'node:stream'

/** The verified events of the request (a request decoration; null until verified). */
export const kEvents = Symbol('mailchannels-webhooks.events')
/** The accepted outcome whose claim the handler's answer settles (a request decoration; null until verified). */
export const kAccepted = Symbol('mailchannels-webhooks.accepted')

/** One webhook route: its receiver (options resolved once) and whether the plugin answers it. */
export interface RouteState {
  readonly receiver: Receiver
  readonly answered: boolean
}

type WebhookRequest = FastifyRequest & { [kEvents]: WebhookEvent[] | null, [kAccepted]: AcceptedOutcome | null }
type Done = (err?: Error | null, payload?: never) => void
type Payload = Parameters<typeof readStream>[0]

/** The verified events of a request, or `undefined` when it was not a verified delivery (never throws). */
export function webhookEventsOf (request: FastifyRequest): WebhookEvent[] | undefined {
  return (request as Partial<WebhookRequest>)[kEvents] ?? undefined
}

/** Sends a receiver reply (a rejection or a duplicate); the handler does not run. */
function send (reply: FastifyReply, r: { status: number, headers: Record<string, string>, body: unknown }): void {
  reply.code(r.status).headers(r.headers).send(r.body)
}

/** Refuses a request with `err` (logged, in the webhook error shape); the handler does not run. */
export function refuse (request: FastifyRequest, reply: FastifyReply, err: unknown): void {
  send(reply, rejection(err, request.headers, request.log).reply)
}

/**
 * The preParsing hook of a webhook route: transport checks before any byte is read, then the raw
 * bytes (at most `bodyLimit`), verification and the replay claim. Accepted: `request.body` is the
 * raw bytes, `request.webhookEvents` the events, and Fastify is told the body is already read
 * (see `hideBodyFromParser`). `early`: a route declared before the plugin loaded, verified by a
 * scope hook: the plugin answers `handlers` / `enqueue` here (it could not replace the route's
 * handler).
 */
export function receiveDelivery (state: RouteState, request: FastifyRequest, reply: FastifyReply, payload: Payload, done: Done, early: boolean): void {
  const { receiver } = state
  const bad = receiver.check(request.headers, request.log)
  if (bad !== null) {
    send(reply, bad.reply)
    return
  }
  readStream(payload, receiver.options.bodyLimit).then((body) => {
    const outcome = receiver.receive(body, request.headers, request.log)
    if (!(outcome instanceof Promise)) {
      proceed(state, request, reply, body, outcome, done, early)
      return
    }
    return outcome.then((o) => { proceed(state, request, reply, body, o, done, early) })
  }, (err: unknown) => { refuse(request, reply, err) }).catch((err: unknown) => {
    request.log.error({ err }, 'mailchannels webhook: failed after verification')
  })
}

function proceed (state: RouteState, request: FastifyRequest, reply: FastifyReply, body: Uint8Array, outcome: Awaited<ReturnType<Receiver['receive']>>, done: Done, early: boolean): void {
  if (outcome.kind !== 'accepted') {
    send(reply, outcome.reply)
    return
  }
  const r = request as WebhookRequest
  r.body = body
  r[kAccepted] = outcome
  r[kEvents] = outcome.events
  if (early && state.answered) {
    // answerDelivery never rejects and settles the claim itself.
    void answerDelivery(state.receiver.options.answer!, outcome, request.log).then((answered) => { send(reply, answered) })
    return
  }
  if (reply.sent) return
  if (early) {
    // A scope hook: the route's own preParsing hooks, declared before the plugin loaded, run
    // after it. One that reads request.headers takes the one read meant for Fastify, which then
    // parses: it is handed the verified bytes, never the socket's (already read) stream.
    hideBodyFromParser(request)
    done(null, Readable.from([body]) as never)
    return
  }
  hideBodyFromParser(request)
  done()
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

/** onSend of a webhook route: the handler's answer, whatever the socket's state, settles the claim. */
export function settleOnSend (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void): void {
  const accepted = (request as WebhookRequest)[kAccepted]
  // A fetch Response payload carries its own status, applied after the onSend hooks.
  if (accepted !== null && accepted !== undefined) settle(accepted, payload instanceof Response ? payload.status : reply.statusCode)
  done(null, payload)
}

/** The handler of a route the plugin answers (`handlers` or `enqueue`): dispatches or enqueues the verified events; never throws. */
export function answerHandler (state: RouteState): (request: FastifyRequest, reply: FastifyReply) => Promise<unknown> {
  return async function answerMailChannelsDelivery (request, reply) {
    const accepted = (request as WebhookRequest)[kAccepted]
    if (accepted === null) throw new VerificationError('configuration_error', 'The delivery was not verified.')
    const answered = await answerDelivery(state.receiver.options.answer!, accepted, request.log)
    reply.code(answered.status).headers(answered.headers)
    return answered.body
  }
}
