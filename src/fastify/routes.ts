// Registration of the Fastify plugin: options validated once, the request decorators, which
// routes are webhook routes (and the checks that make ready() fail rather than leave one
// unverified), and the content-type parsers that keep their raw bytes. The request flow of a
// webhook route is in ./plugin.ts.
import { subscribe } from 'node:diagnostics_channel'
import type { FastifyError, FastifyInstance, FastifyRequest, RouteOptions } from 'fastify'
import { errorCodes } from 'fastify'
import fp from 'fastify-plugin'
import { VerificationError } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import {
  createReceiver,
  keyStoreFactory,
  rejectUnknownOptions,
  resolveReceiverOptions,
  type WebhookReceiverOptions,
  type WebhookRouteOptions,
} from '../receiver/index.js'
import { readStream } from '../receiver/node/read-stream.js'
import { answerHandler, kActive, kEvents, kRoute, refuse, settleOnSend, transportHook, verifyHook, wrapErrorHandler, type ActiveRequest, type RouteState } from './plugin.js'

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The verified, typed events of a MailChannels delivery: set on webhook routes, after the
     * delivery was verified, before the handler runs. Reading it anywhere else (a route that is
     * not a webhook route, a hook of a rejected request) throws an `Error` saying so, so it is
     * never `null` or `undefined` where the type says it is an array. Use
     * `webhookEventsOf(request)` where it may be absent.
     */
    webhookEvents: WebhookEvent[]
  }
  interface FastifyContextConfig {
    /**
     * In the plugin's scope every POST route is a webhook route, verified before its handler
     * runs. `false` marks a route that is not one (its body is parsed as usual); an options
     * object overrides the plugin's options for the route; `true` says it explicitly. With
     * `handlers` or `enqueue` (here or in the plugin's options) the plugin answers the delivery
     * itself and the route's own handler does not run.
     * @default true for POST routes in the plugin's scope
     */
    mailchannelsWebhook?: boolean | WebhookRouteOptions
  }
}

/**
 * Options of the Fastify plugin: everything `verify` takes, plus `bodyLimit`, `contentTypes`,
 * `replay`, `verifyOnThreadPool`, `handlers` / `enqueue` and `path`. `customerHandles` is
 * required (or `'any'`).
 */
export interface MailChannelsWebhooksOptions extends WebhookReceiverOptions {
  /**
   * Declare the webhook route here: `POST <path>` in the scope the plugin is registered in,
   * answered by `handlers` or `enqueue` (one of them is required with `path`), so there is no
   * route to write: `app.register(mailchannelsWebhooks, { path: '/webhooks/mailchannels', customerHandles, handlers: router })`.
   * @default undefined (declare webhook routes yourself)
   */
  path?: string
}

/** Options Fastify itself may pass to a plugin along with ours. */
const FASTIFY_REGISTER_OPTIONS = ['prefix', 'logLevel', 'logSerializers', 'path']

/** The options that say who answers a delivery: a route that sets one of them replaces the plugin's. */
const ANSWER_OPTIONS = ['handlers', 'enqueue', 'enqueueTimeout'] as const

type RouteConfig = Record<string | symbol, unknown> & { mailchannelsWebhook?: unknown, [kRoute]?: RouteState }

const NOT_VERIFIED = 'request.webhookEvents is only available in the handler of a MailChannels webhook route, after the delivery was verified; ' +
  'this request was not verified (a route with config.mailchannelsWebhook: false, outside the plugin\'s scope, or a rejected delivery). ' +
  'Use webhookEventsOf(request) where the events may be absent.'

function asArray<T> (v: T | T[] | undefined): T[] {
  return v === undefined ? [] : Array.isArray(v) ? v : [v]
}

// ---------------------------------------------------------------------------------------------
// Fail-closed routing. Every route of an app is recorded by a root-level onRoute hook, added
// when the app is created (Fastify's documented `fastify.initialization` diagnostics channel),
// so at ready() the plugin can see the routes it could not set up: one that opts in but sits
// where no registration reaches it, or a POST route of a registration's scope declared before
// the plugin. Either makes ready() reject instead of running a handler on an unverified body.

interface RecordedRoute { opts: RouteOptions, scope: object }
interface AppWatch { routes: RecordedRoute[], scopes: object[], failed: string | null }

const watched = new WeakMap<object, AppWatch>()

function watchApp (root: FastifyInstance): AppWatch {
  let watch = watched.get(root)
  if (watch !== undefined) return watch
  const w: AppWatch = { routes: [], scopes: [], failed: null }
  watched.set(root, w)
  root.addHook('onRoute', function (this: FastifyInstance, opts) {
    const opt = (opts.config as RouteConfig | undefined)?.mailchannelsWebhook
    if (opt !== undefined || asArray(opts.method).includes('POST')) w.routes.push({ opts, scope: this })
  })
  root.addHook('onReady', function (done) {
    w.failed = unverifiedRoutes(w)
    done(w.failed === null ? undefined : new Error(w.failed))
  })
  // Fastify still serves inject() after ready() rejected: an app that failed this check answers
  // every request 500 rather than run a handler on an unverified body.
  root.addHook('onRequest', function (request, reply, done) {
    if (w.failed === null) {
      done()
      return
    }
    refuse(request, reply, new VerificationError('configuration_error', 'The server is misconfigured: a webhook route is not verified (see the error of ready()).'))
  })
  watch = w
  return watch
}

subscribe('fastify.initialization', (message) => {
  const fastify = (message as { fastify?: FastifyInstance }).fastify
  if (fastify !== undefined) watchApp(fastify)
})

/** The root instance: Fastify builds each encapsulated scope with Object.create(parent). */
function rootOf (instance: FastifyInstance): FastifyInstance {
  let root = instance
  for (let p = Object.getPrototypeOf(root) as FastifyInstance | null; p !== null && typeof p.addHook === 'function'; p = Object.getPrototypeOf(p) as FastifyInstance | null) root = p
  return root
}

function covers (scope: object, routeScope: object): boolean {
  return scope === routeScope || Object.prototype.isPrototypeOf.call(scope, routeScope)
}

/** The routes a handler would run on unverified, as one error message; null when there are none. */
function unverifiedRoutes (w: AppWatch): string | null {
  const found: string[] = []
  for (const { opts, scope } of w.routes) {
    const config = opts.config as RouteConfig | undefined
    if (config?.[kRoute] !== undefined) continue
    const opt = config?.mailchannelsWebhook
    if (opt === false) continue
    const route = `${asArray(opts.method).join(',')} ${opts.url}`
    if (w.scopes.some((s) => covers(s, scope))) {
      found.push(`${route} is in the scope of mailchannels-webhooks but was declared before the plugin was registered, so it would not be verified`)
    } else if (opt !== undefined) {
      found.push(`${route} opts in with config.mailchannelsWebhook, but no mailchannels-webhooks registration reaches its scope`)
    }
  }
  if (found.length === 0) return null
  const more = found.length > 5 ? ` (and ${found.length - 5} more)` : ''
  return `mailchannels-webhooks: ${found.slice(0, 5).join('; ')}${more}. ` +
    'Register the plugin before declaring webhook routes, in their scope or a parent scope (`await app.register(mailchannelsWebhooks, options)`, then the routes), ' +
    'and mark POST routes that are not webhook routes with `config: { mailchannelsWebhook: false }`.'
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

function setup (fastify: FastifyInstance, registration: MailChannelsWebhooksOptions): void {
  if (fastify.hasRequestDecorator('webhookEvents')) {
    throw new Error('mailchannels-webhooks is already registered in this scope or a parent one; use config.mailchannelsWebhook options to configure routes differently')
  }
  rejectUnknownOptions(registration, FASTIFY_REGISTER_OPTIONS)
  const { path, ...options } = registration
  if ((options as { logger?: unknown }).logger !== undefined) throw new TypeError('logger is not an option of the Fastify plugin: it logs through request.log')
  const keyStoreFor = keyStoreFactory(fastify.log)
  const base = resolveReceiverOptions(options, keyStoreFor)
  if (path !== undefined) {
    if (typeof path !== 'string' || !path.startsWith('/')) throw new TypeError("path must be a URL path starting with '/', such as '/webhooks/mailchannels'")
    if (base.answer === null) throw new TypeError('path declares a route the plugin answers itself: give handlers (a WebhookEventRouter) or enqueue too, or leave path out and declare the route yourself')
  }

  const root = rootOf(fastify)
  if (!watched.has(root) && fastify.printRoutes() !== '(empty tree)') {
    throw new Error('mailchannels-webhooks was loaded after this Fastify instance was created and routes were already declared, so it cannot check that every webhook route is verified. ' +
      "Import 'mailchannels-webhooks/fastify' before creating the instance (a static import at the top of the file), or register the plugin before declaring any route.")
  }
  watchApp(root).scopes.push(fastify)

  if (base.anyCustomer) {
    fastify.log.warn("mailchannels-webhooks: customerHandles is 'any': deliveries signed for any MailChannels customer are accepted")
  }

  fastify.decorateRequest(kActive as unknown as string, null)
  fastify.decorateRequest(kEvents as unknown as string, null)
  fastify.decorateRequest('webhookEvents', {
    getter (this: FastifyRequest): WebhookEvent[] {
      const events = (this as ActiveRequest)[kEvents]
      if (events === null) throw new Error(NOT_VERIFIED)
      return events
    },
  } as never)

  const replaced = addParsers(fastify)

  const verified: string[] = []
  const answered: string[] = []
  fastify.addHook('onRoute', (routeOptions) => {
    const opt = (routeOptions.config as RouteConfig | undefined)?.mailchannelsWebhook
    if (opt === false || (opt === undefined && !asArray(routeOptions.method).includes('POST'))) {
      // Not a webhook route: it must not silently lose a custom parser of its parent scope.
      if (replaced.length > 0 && asArray(routeOptions.method).some((m) => BODY_METHODS.has(m))) {
        throw new Error(`${asArray(routeOptions.method).join(',')} ${routeOptions.url} would lose the custom ${replaced.join(' and ')} parser of a parent scope, ` +
          'which mailchannels-webhooks replaces in its scope to read deliveries raw. Declare this route outside the plugin\'s scope, or register the plugin in an encapsulated scope of its own ' +
          '(app.register(async (webhooks) => { await webhooks.register(mailchannelsWebhooks, options); webhooks.post(...) })).')
      }
      return
    }
    if (opt !== undefined && opt !== true && (opt === null || typeof opt !== 'object')) {
      throw new TypeError(`config.mailchannelsWebhook of ${routeOptions.url} must be true, false or an options object`)
    }
    const methods = asArray(routeOptions.method)
    if (!methods.includes('POST')) {
      if (opt === undefined) return
      throw new Error(`${methods.join(',')} ${routeOptions.url} opts in to config.mailchannelsWebhook, but MailChannels delivers webhooks with POST only`)
    }
    if (methods.length > 1) {
      throw new Error(`${methods.join(',')} ${routeOptions.url} is in the scope of mailchannels-webhooks, where a POST route is a webhook route: declare the webhook route for POST only, or mark this one config.mailchannelsWebhook: false`)
    }
    let r = base
    if (opt !== undefined && opt !== true) {
      rejectUnknownOptions(opt)
      const routeOpt = opt as WebhookRouteOptions
      // handlers, enqueue (and its timeout) of the route replace the plugin's: never both.
      const ownAnswer = ANSWER_OPTIONS.some((name) => name in routeOpt) ? { handlers: undefined, enqueue: undefined, enqueueTimeout: undefined } : {}
      r = resolveReceiverOptions({ ...options, ...ownAnswer, ...routeOpt, replay: 'replay' in routeOpt ? routeOpt.replay : base.replay ?? false } as WebhookReceiverOptions, keyStoreFor)
      if (r.anyCustomer && !base.anyCustomer) {
        fastify.log.warn({ url: routeOptions.url }, "mailchannels-webhooks: customerHandles is 'any' on this route: deliveries signed for any MailChannels customer are accepted")
      }
    }
    // A fresh config object per route: a config object shared by two routes must not share state.
    const state: RouteState = { receiver: createReceiver(r) }
    routeOptions.config = { ...routeOptions.config, [kRoute]: state } as typeof routeOptions.config
    routeOptions.bodyLimit = r.bodyLimit
    routeOptions.onRequest = [transportHook, ...asArray(routeOptions.onRequest)] as RouteOptions['onRequest']
    routeOptions.preValidation = [verifyHook, ...asArray(routeOptions.preValidation)] as RouteOptions['preValidation']
    routeOptions.onSend = [...asArray(routeOptions.onSend), settleOnSend] as RouteOptions['onSend']
    routeOptions.errorHandler = wrapErrorHandler(routeOptions.errorHandler as Parameters<typeof wrapErrorHandler>[0])
    if (r.answer !== null) {
      // The plugin answers: dispatch or enqueue in the handler's place, after the route's own hooks.
      routeOptions.handler = answerHandler as RouteOptions['handler']
      answered.push(`POST ${routeOptions.url}`)
    }
    verified.push(`POST ${routeOptions.url}`)
  })
  if (path !== undefined) fastify.post(path, answerHandler)

  fastify.addHook('onReady', function (ready) {
    fastify.log.info({ routes: verified }, 'mailchannels-webhooks: verifying MailChannels deliveries on these routes')
    if (answered.length > 0) fastify.log.info({ routes: answered }, 'mailchannels-webhooks: these routes are answered by handlers or enqueue (their own handler does not run)')
    const server = fastify.server as { requestTimeout?: number } | undefined
    if (server?.requestTimeout === 0) {
      fastify.log.warn('mailchannels-webhooks: requestTimeout is 0, so a client can trickle a request body forever; set Fastify({ requestTimeout: 30000, connectionTimeout: 60000 })')
    }
    ready()
  })
}

/**
 * Content-type parsers of the plugin's scope. Webhook routes get the exact raw bytes whatever
 * the media type, or none; every other route of the scope parses as before: Fastify's own JSON
 * parser (with the app's poisoning settings, fed the same UTF-8 string Fastify decodes), its
 * text/plain parser, and 415 for a media type no parser handles. Returns the media types whose
 * custom parser (inherited from a parent scope) was replaced in this scope.
 */
function addParsers (fastify: FastifyInstance): string[] {
  const init = fastify.initialConfig
  const defaultJson = fastify.getDefaultJsonParser(init.onProtoPoisoning ?? 'error', init.onConstructorPoisoning ?? 'error')
  const isWebhook = (request: FastifyRequest): boolean => (request as ActiveRequest)[kActive] !== null
  const replaced: string[] = []
  const add = (type: string, parser: (request: FastifyRequest, body: Buffer, parsed: (err: Error | null, body?: unknown) => void) => void): void => {
    const options = { parseAs: 'buffer' as const, bodyLimit: init.bodyLimit }
    try {
      fastify.addContentTypeParser(type, options, parser as never)
    } catch (err) {
      if ((err as FastifyError).code !== 'FST_ERR_CTP_ALREADY_PRESENT') throw err
      // A custom parser for this type: in this scope it gives way (see the onRoute check).
      fastify.removeContentTypeParser(type)
      fastify.addContentTypeParser(type, options, parser as never)
      replaced.push(type)
    }
  }
  add('application/json', (request, body, parsed) => {
    if (isWebhook(request)) parsed(null, body)
    else defaultJson(request, body.toString('utf8'), parsed)
  })
  add('text/plain', (request, body, parsed) => {
    parsed(null, isWebhook(request) ? body : body.toString('utf8'))
  })
  fastify.addContentTypeParser('*', (request, payload, parsed) => {
    const state = (request as ActiveRequest)[kActive]
    if (state === null) {
      // What Fastify answers when no parser handles a media type.
      parsed(new errorCodes.FST_ERR_CTP_INVALID_MEDIA_TYPE(), undefined)
      return
    }
    readStream(payload, state.receiver.options.bodyLimit).then((body) => { parsed(null, body) }, (err: Error) => { parsed(err, undefined) })
  })
  return replaced
}

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'QUERY', 'SEARCH', 'PROPFIND', 'REPORT'])

/**
 * The MailChannels webhooks plugin for Fastify 5. In the scope where it is registered (and the
 * scopes registered inside it afterwards), every POST route is a webhook route: the exact raw
 * bytes are verified before its handler runs, and the handler reads `request.webhookEvents`.
 * Mark a POST route that is not a webhook route with `config: { mailchannelsWebhook: false }`
 * (its body is parsed as usual), or give webhook routes an encapsulated scope of their own.
 *
 * Fails closed at `ready()`: an opted-in route (`config.mailchannelsWebhook`) that no
 * registration reaches, or a POST route of the plugin's scope declared before the plugin,
 * makes `ready()` reject with a message saying where to register.
 * Replies: 400, 401, 403, 413, 415, 503 (+ Retry-After) as `{ statusCode, code, error, message }`;
 * an exact resend is answered `200 { duplicate: true }` without running the handler.
 *
 * With `handlers` (a `WebhookEventRouter`) or `enqueue`, the plugin answers verified deliveries
 * itself: 200 `{ handled, skipped, unhandled }` or `{ queued }`, 500 `handler_error`, 503 with
 * `Retry-After`. With `path` it also declares the route:
 * `await app.register(mailchannelsWebhooks, { path: '/webhooks/mailchannels', customerHandles: ['acct_1'], handlers: router })`.
 *
 * Set server timeouts against slow bodies: `Fastify({ requestTimeout: 30_000, connectionTimeout: 60_000 })`
 * (and keep Node's `headersTimeout` ≤ 60 s, `keepAliveTimeout` a few seconds); a warning is
 * logged at startup while `requestTimeout` is 0 (Fastify's default).
 */
export const mailchannelsWebhooksPlugin = fp(mailchannelsWebhooks, { name: 'mailchannels-webhooks', fastify: '5.x' })
