import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction, RouteOptions } from 'fastify'
import { VerificationError } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import { answerDelivery, rejection, settle, tooLarge, type AcceptedOutcome, type ReceiveOutcome, type Receiver } from '../receiver/index.js'

// The request flow of a webhook route: Fastify's hooks translated to the receiver's steps.
// Registration and the route checks are in ./routes.ts.

/** What a set-up route carries in its config (under kRoute). */
export interface RouteState { receiver: Receiver }

export const kRoute = Symbol('mailchannels-webhooks.route')
export const kActive = Symbol('mailchannels-webhooks.active')
export const kEvents = Symbol('mailchannels-webhooks.events')
const kAccepted = Symbol('mailchannels-webhooks.accepted')
const EMPTY = new Uint8Array(0)

export type ActiveRequest = FastifyRequest & { [kActive]: RouteState | null, [kEvents]: WebhookEvent[] | null, [kAccepted]?: AcceptedOutcome }

/** The verified events of a request, or `undefined` when it was not a verified delivery (never throws). */
export function webhookEventsOf (request: FastifyRequest): WebhookEvent[] | undefined {
  return (request as Partial<ActiveRequest>)[kEvents] ?? undefined
}

/** Answers an outcome: runs the handler (accepted: decorate, continue) or sends the receiver's reply. */
function apply (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction, outcome: ReceiveOutcome): void {
  if (outcome.kind === 'accepted') {
    // Its claim is settled by the handler's answer (settleOnSend), never by the connection.
    ;(request as ActiveRequest)[kAccepted] = outcome
    ;(request as ActiveRequest)[kEvents] = outcome.events
    done()
    return
  }
  reply.code(outcome.reply.status).headers(outcome.reply.headers).send(outcome.reply.body)
}

/** Refuses a request with `err` (logged, in the webhook error shape); the handler does not run. */
export function refuse (request: FastifyRequest, reply: FastifyReply, err: unknown): void {
  apply(request, reply, () => {}, rejection(err, request.headers, request.log))
}

/** onRequest of a webhook route: the transport checks, before any body byte is read. */
export function transportHook (this: unknown, request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
  const state = (request.routeOptions.config as { [kRoute]?: RouteState })[kRoute]!
  const bad = state.receiver.check(request.headers, request.log)
  if (bad !== null) return apply(request, reply, done, bad)
  ;(request as ActiveRequest)[kActive] = state
  done()
}

/** preValidation of a webhook route: verify and claim the raw bytes the parser kept. */
export function verifyHook (this: unknown, request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
  const body = request.body ?? EMPTY
  if (!(body instanceof Uint8Array)) {
    return refuse(request, reply, new VerificationError('configuration_error', 'The raw body is not available: a content-type parser added in the scope of this webhook route handled the request. ' +
      'Register custom content-type parsers in a scope without webhook routes.'))
  }
  const outcome = (request as ActiveRequest)[kActive]!.receiver.receive(body, request.headers, request.log)
  if (!(outcome instanceof Promise)) return apply(request, reply, done, outcome)
  outcome.then((o) => { apply(request, reply, done, o) }).catch((err: unknown) => { request.log.error({ err }, 'mailchannels webhook: failed after verification') })
}

/** onSend of a webhook route (the last one): the handler's answer, whatever the socket's state, settles the claim. */
export function settleOnSend (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void): void {
  const claimed = (request as ActiveRequest)[kAccepted]
  // A fetch Response payload carries its own status, applied after the onSend hooks.
  if (claimed !== undefined) settle(claimed, payload instanceof Response ? payload.status : reply.statusCode)
  done(null, payload)
}

/**
 * The handler of a route answered by the plugin (`handlers` or `enqueue`): dispatches or
 * enqueues the verified events and answers with the outcome; never throws.
 */
export async function answerHandler (this: unknown, request: FastifyRequest, reply: FastifyReply): Promise<unknown> {
  const r = request as ActiveRequest
  const answered = await answerDelivery(r[kActive]!.receiver.options.answer!, r[kAccepted]!, request.log)
  reply.code(answered.status).headers(answered.headers)
  return answered.body
}

type ErrorHandler = NonNullable<RouteOptions['errorHandler']>

/** Body-reading failures of a webhook route answer in the webhook shape; other errors go to the route's or the app's error handler. */
export function wrapErrorHandler (user: ErrorHandler | undefined): ErrorHandler {
  return function (this: FastifyInstance, error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
    const state = (request as ActiveRequest)[kActive]
    if (state !== null && (request as ActiveRequest)[kEvents] === null) {
      if (error instanceof VerificationError) return refuse(request, reply, error)
      if (error?.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return refuse(request, reply, tooLarge(state.receiver.options.bodyLimit))
    }
    if (user !== undefined) return user.call(this, error, request, reply)
    // Throwing hands the error to the next (app-level) error handler, as if this one did not exist.
    throw error
  }
}
