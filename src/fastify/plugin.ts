import type {
  FastifyError,
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  HookHandlerDoneFunction,
  RouteOptions,
} from 'fastify'
import fp from 'fastify-plugin'
import {
  asVerificationError,
  claimDelivery,
  DUPLICATE_BODY,
  failureReply,
  ClaimSettlement,
  logRejection,
  verifyBody,
} from '../adapter/flow.js'
import {
  keyStoreFactory,
  rejectUnknownOptions,
  resolveReceiverOptions,
  type ResolvedReceiver,
  type WebhookReceiverOptions,
  type WebhookRouteOptions,
} from '../adapter/options.js'
import { checkTransport, tooLarge } from '../adapter/transport.js'
import { VerificationError } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import type { VerifiedDelivery } from '../verify/verify-webhook.js'

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The verified, typed events of a MailChannels delivery. Set only on routes that opt in
     * with `config.mailchannelsWebhook`, and only after verification succeeded (`null` otherwise).
     */
    webhookEvents: WebhookEvent[]
  }
  interface FastifyContextConfig {
    /** Opts a POST route in to MailChannels webhook verification: `true`, or options overriding the plugin's. */
    mailchannelsWebhook?: boolean | WebhookRouteOptions
  }
}

/**
 * Options of the Fastify plugin: everything `verify` takes, plus `bodyLimit`, `replay`
 * and `verifyOnThreadPool`. `customerHandles` is required (or `'any'`).
 */
export type MailChannelsWebhooksOptions = WebhookReceiverOptions

/** What a set-up route carries in its config (under a private symbol). */
interface RouteState { r: ResolvedReceiver }

const kRoute = Symbol('mailchannels-webhooks.route')
const kActive = Symbol('mailchannels-webhooks.active')
const kClaim = Symbol('mailchannels-webhooks.claim')
const EMPTY = Buffer.alloc(0)
/** Options Fastify itself may pass to a plugin along with ours. */
const FASTIFY_REGISTER_OPTIONS = ['prefix', 'logLevel', 'logSerializers']

type ActiveRequest = FastifyRequest & { [kActive]: RouteState | null, [kClaim]?: ClaimSettlement }
type RouteConfig = Record<string | symbol, unknown> & { mailchannelsWebhook?: unknown, [kRoute]?: RouteState }

/** Replies a failure in the webhook error shape, with one log line. The handler does not run. */
function fail (request: FastifyRequest, reply: FastifyReply, err: unknown): void {
  const e = asVerificationError(err)
  if (!(err instanceof VerificationError)) request.log.error({ err }, 'mailchannels webhook: unexpected error while verifying')
  const f = failureReply(e)
  logRejection(request.log, e, f.status, request.headers)
  reply.code(f.status)
  if (f.retryAfter !== undefined) reply.header('retry-after', String(f.retryAfter))
  // Don't keep reading a body we refused for its size.
  if (f.status === 413) reply.header('connection', 'close')
  reply.send(f.body)
}

/** After verification: claim the delivery (when replay protection is on), decorate, continue. */
function accept (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction, r: ResolvedReceiver, delivery: VerifiedDelivery): void {
  const store = r.replay
  if (store === null) {
    request.webhookEvents = delivery.events
    done()
    return
  }
  claimDelivery(store, delivery, r.replayTtl).then((outcome) => {
    if (!outcome.claimed) {
      request.log.info({ keyId: delivery.keyId, state: outcome.state }, 'mailchannels webhook: duplicate delivery, not handled again')
      reply.code(200).send(DUPLICATE_BODY)
      return
    }
    // Settled by the handler's answer (the onSend hook below), never by the connection.
    ;(request as ActiveRequest)[kClaim] = new ClaimSettlement(store, outcome.id, r.replayTtl, request.log)
    request.webhookEvents = delivery.events
    done()
  }, (err: unknown) => { fail(request, reply, err) })
    .catch((err: unknown) => { request.log.error({ err }, 'mailchannels webhook: failed after the replay claim') })
}

/** The route-level preValidation hook: verify the raw bytes the parser kept. */
function verifyHook (this: unknown, request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
  const state = (request as ActiveRequest)[kActive]
  if (state === null) {
    fail(request, reply, new VerificationError('configuration_error', 'The webhook route is not set up by the mailchannels-webhooks plugin.'))
    return
  }
  const body = request.body
  let raw: Buffer
  if (body === undefined || body === null) raw = EMPTY
  else if (Buffer.isBuffer(body)) raw = body
  else {
    fail(request, reply, new VerificationError('configuration_error', 'The raw body is not available: another content-type parser handled this request. Do not add an application/json parser in the scope of webhook routes.'))
    return
  }
  let result: VerifiedDelivery | Promise<VerifiedDelivery>
  try {
    result = verifyBody(state.r, raw, request.headers, request.log)
  } catch (err) {
    fail(request, reply, err)
    return
  }
  if (result instanceof Promise) {
    result.then((d) => { accept(request, reply, done, state.r, d) }, (err: unknown) => { fail(request, reply, err) })
      .catch((err: unknown) => { request.log.error({ err }, 'mailchannels webhook: failed after verification') })
  } else {
    accept(request, reply, done, state.r, result)
  }
}

/**
 * The route-level onSend hook (the last one): the handler's answer, whatever the socket's
 * state, settles the replay claim. Fastify runs onSend for every reply.send, including the
 * error handler's answer to a throw, and also when the client has already gone.
 */
function settleOnSend (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void): void {
  const claim = (request as ActiveRequest)[kClaim]
  if (claim !== undefined) {
    // A fetch Response payload carries its own status, applied after the onSend hooks.
    const status = payload instanceof Response ? payload.status : reply.statusCode
    claim.settle(status)
  }
  done(null, payload)
}

type ErrorHandler = NonNullable<RouteOptions['errorHandler']>

/** Turns Fastify's own 413 (a chunked body over the limit) into the webhook shape; anything else goes to the route's or the app's error handler unchanged. */
function wrapErrorHandler (user: ErrorHandler | undefined): ErrorHandler {
  return function (this: FastifyInstance, error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
    const state = (request as ActiveRequest)[kActive]
    if (state !== null && error?.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      fail(request, reply, tooLarge(state.r.bodyLimit))
      return
    }
    if (user !== undefined) return user.call(this, error, request, reply)
    // Throwing hands the error to the next (app-level) error handler, as if this one did not exist.
    throw error
  }
}

function asArray<T> (v: T | T[] | undefined): T[] {
  return v === undefined ? [] : Array.isArray(v) ? v : [v]
}

function mailchannelsWebhooks (fastify: FastifyInstance, options: MailChannelsWebhooksOptions, done: (err?: Error) => void): void {
  // Invalid options reject app.ready() (a throw here would escape avvio as an uncaught exception).
  try {
    setup(fastify, options)
  } catch (err) {
    done(err as Error)
    return
  }
  done()
}

function setup (fastify: FastifyInstance, options: MailChannelsWebhooksOptions): void {
  if (fastify.hasRequestDecorator('webhookEvents')) {
    throw new Error('mailchannels-webhooks is already registered in this scope or a parent one; use config.mailchannelsWebhook options to configure routes differently')
  }
  rejectUnknownOptions(options, FASTIFY_REGISTER_OPTIONS)
  if ((options as { logger?: unknown }).logger !== undefined) throw new TypeError('logger is not an option of the Fastify plugin: it logs through request.log')
  const keyStoreFor = keyStoreFactory(fastify.log)
  const base = resolveReceiverOptions(options, keyStoreFor)
  if (base.anyCustomer) {
    fastify.log.warn("mailchannels-webhooks: customerHandles is 'any': deliveries signed for any MailChannels customer are accepted (threat-model T22)")
  }

  fastify.decorateRequest('webhookEvents', null as unknown as WebhookEvent[])
  fastify.decorateRequest(kActive as unknown as string, null)

  // Opted-in routes get the exact bytes; every other route gets Fastify's own JSON parser,
  // fed the same UTF-8 string Fastify would have decoded (parseAs 'string' decodes the same way).
  const init = fastify.initialConfig
  const defaultJson = fastify.getDefaultJsonParser(init.onProtoPoisoning ?? 'error', init.onConstructorPoisoning ?? 'error')
  fastify.removeContentTypeParser('application/json')
  fastify.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit: init.bodyLimit }, (request, body, parsed) => {
    if ((request as ActiveRequest)[kActive] !== null) {
      parsed(null, body)
      return
    }
    defaultJson(request, (body as Buffer).toString('utf8'), parsed)
  })

  // One hook for the whole scope: it sees every route, so an opted-in route declared before
  // this plugin was registered fails closed instead of running its handler unverified.
  fastify.addHook('onRequest', function (request, reply, next) {
    const config = request.routeOptions.config as unknown as RouteConfig | undefined
    const state = config?.[kRoute]
    if (state === undefined) {
      if (config?.mailchannelsWebhook !== undefined && config.mailchannelsWebhook !== false) {
        fail(request, reply, new VerificationError('configuration_error', 'This webhook route was declared before the mailchannels-webhooks plugin was registered; declare it after `await app.register(...)`.'))
        return
      }
      next()
      return
    }
    const h = request.headers
    const bad = checkTransport(h['content-type'], h['content-encoding'], h['content-length'], state.r.bodyLimit)
    if (bad !== null) {
      fail(request, reply, bad)
      return
    }
    ;(request as ActiveRequest)[kActive] = state
    next()
  })

  fastify.addHook('onRoute', (routeOptions) => {
    const opt = (routeOptions.config as RouteConfig | undefined)?.mailchannelsWebhook
    if (opt === undefined || opt === false) return
    if (opt !== true && (opt === null || typeof opt !== 'object')) {
      throw new TypeError(`config.mailchannelsWebhook of ${routeOptions.url} must be true or an options object`)
    }
    const methods = asArray(routeOptions.method)
    if (methods.length === 0 || methods.some((m) => m !== 'POST')) {
      throw new Error(`${String(routeOptions.method)} ${routeOptions.url} opts in to config.mailchannelsWebhook, but MailChannels delivers webhooks with POST only`)
    }
    let r = base
    if (opt !== true) {
      rejectUnknownOptions(opt)
      const routeOpt = opt as WebhookRouteOptions
      r = resolveReceiverOptions({ ...options, ...routeOpt, replay: 'replay' in routeOpt ? routeOpt.replay : base.replay ?? false } as WebhookReceiverOptions, keyStoreFor)
      if (r.anyCustomer && !base.anyCustomer) {
        fastify.log.warn({ url: routeOptions.url }, "mailchannels-webhooks: customerHandles is 'any' on this route: deliveries signed for any MailChannels customer are accepted")
      }
    }
    // A fresh config object per route: a config object shared by two routes must not share state.
    routeOptions.config = { ...routeOptions.config, [kRoute]: { r } } as typeof routeOptions.config
    routeOptions.bodyLimit = r.bodyLimit
    routeOptions.preValidation = [verifyHook, ...asArray(routeOptions.preValidation)] as RouteOptions['preValidation']
    routeOptions.onSend = [...asArray(routeOptions.onSend), settleOnSend] as RouteOptions['onSend']
    routeOptions.errorHandler = wrapErrorHandler(routeOptions.errorHandler as ErrorHandler | undefined)
  })

  fastify.addHook('onReady', function (ready) {
    const server = fastify.server as { requestTimeout?: number } | undefined
    if (server?.requestTimeout === 0) {
      fastify.log.warn('mailchannels-webhooks: requestTimeout is 0, so a client can trickle a request body forever; set Fastify({ requestTimeout: 30000, connectionTimeout: 60000 })')
    }
    ready()
  })
}

/**
 * The MailChannels webhooks plugin for Fastify 5. Register it **before** declaring webhook
 * routes (`await app.register(...)`), then opt POST routes in with
 * `{ config: { mailchannelsWebhook: true } }` (or an options object overriding the plugin's).
 * On those routes the exact raw bytes are verified before the handler runs, and the
 * handler reads `request.webhookEvents`. Every other route keeps Fastify's JSON parser.
 *
 * An opted-in route declared before the plugin was registered in the same scope answers
 * 500 `configuration_error` and its handler never runs; routes inside a plugin that was
 * registered earlier than this one are not seen at all, so keep webhook routes after it.
 * Replies: 400, 401, 403, 413, 415, 503 (+ Retry-After) as `{ statusCode, code, error, message }`;
 * an exact resend is answered `200 { duplicate: true }` without running the handler.
 *
 * Set server timeouts against slow bodies: `Fastify({ requestTimeout: 30_000, connectionTimeout: 60_000 })`
 * (and keep Node's `headersTimeout` ≤ 60 s, `keepAliveTimeout` a few seconds); a warning is
 * logged at startup while `requestTimeout` is 0 (Fastify's default).
 */
export const mailchannelsWebhooksPlugin = fp(mailchannelsWebhooks, { name: 'mailchannels-webhooks', fastify: '5.x' })
