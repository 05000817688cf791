// The Fastify plugin: options validated once, the request decorators, and each webhook route's
// pipeline and hooks. Opt-in only: the route the plugin declares (`path`) and routes whose config
// says `mailchannelsWebhooks`. Every other route of the app is left exactly as it was: the plugin
// adds no content-type parser and, in the usual set-up, no hook to the app's scope. How opted-in
// routes are found in every scope is ./scopes.ts; a webhook route's request, ./hooks.ts.
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import fp from 'fastify-plugin'
import { VerificationError } from '../errors.js'
import type { WebhookEvent } from '../events/types.js'
import {
  createWebhookPipeline,
  keyStoreFactory,
  rejectUnknownOptions,
  resolveBodyLimit,
  resolveReceiverOptions,
  type WebhookReceiverOptions,
  type WebhookRouteOptions,
} from '../receiver/index.js'
import { KEY, asArray, checkAtReady, coded, covers, guardApp, kGuard, kRoute, optIn, parentOf, pinLast, rootOf, scopesOf, stateOf, watch, type RouteConfig } from './scopes.js'
import { answerHandler, FASTIFY_PORT, kAccepted, kEvents, receiveDelivery, refuse, settleOnSend, type RouteState } from './hooks.js'

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The verified, typed events of a MailChannels delivery: set on webhook routes, after the
     * delivery was verified, before the route's preValidation hooks and handler run. Reading it
     * anywhere else (a route that is not a webhook route, a hook of a rejected request) throws an
     * `Error` saying why, so it is never `null` or `undefined` where the type says it is an
     * array. Use `webhookEventsOf(request)` where it may be absent.
     */
    webhookEvents: WebhookEvent[]
  }
  interface FastifyContextConfig {
    /**
     * Makes this POST route a MailChannels webhook route: the exact raw bytes are verified before
     * its handler runs (no content-type parser runs for it), and the handler reads
     * `request.webhookEvents`. An options object overrides the plugin's options for the route.
     * With `handlers` or `enqueue` (here or in the plugin's options) the plugin answers the
     * delivery itself and the route's own handler does not run. The route must be declared in
     * the scope the plugin is registered in (or a scope registered inside it afterwards).
     * @default undefined (not a webhook route; `false` says so explicitly)
     */
    mailchannelsWebhooks?: boolean | (WebhookRouteOptions & object)
  }
}

/**
 * Options of the Fastify plugin: everything `verify` takes, plus `bodyLimit`, `contentTypes`,
 * `replay`, `verifyOnThreadPool`, `handlers` / `enqueue` and `path`. `customerHandles` is
 * required (or `'any'`). On each webhook route the smaller of `bodyLimit` and Fastify's own
 * limit for the route (its `bodyLimit` option, else the server's) applies.
 */
export interface MailChannelsWebhooksOptions extends WebhookReceiverOptions {
  /**
   * Declare the webhook route here: `POST <prefix><path>` (under the scope's prefix, then the
   * registration's `prefix` option if given), in an
   * encapsulated scope of the plugin's own, answered by `handlers` or `enqueue` (one of them is
   * required with `path`), so there is no route to write:
   * `app.register(mailchannelsWebhooks, { path: '/webhooks/mailchannels', customerHandles, handlers: router })`.
   * @default undefined (opt routes in with `config: { mailchannelsWebhooks: true }`)
   */
  path?: string
}


/** Options Fastify itself may pass to a plugin along with ours. */
const FASTIFY_REGISTER_OPTIONS = ['prefix', 'logLevel', 'logSerializers', 'path']

/** The options that say who answers a delivery: a route that sets one of them replaces the plugin's. */
const ANSWER_OPTIONS = ['handlers', 'enqueue', 'enqueueTimeout'] as const


/** Runs a validation step; a `TypeError` it throws gets the plugin's option error code. */
function validating<T> (fn: () => T): T {
  try {
    return fn()
  } catch (err) {
    if (err instanceof TypeError && (err as { code?: unknown }).code === undefined) coded(err, 'FST_MCWH_INVALID_OPTION')
    throw err
  }
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
  if (fastify.hasRequestDecorator(kEvents as unknown as string)) {
    throw coded(new Error('mailchannels-webhooks is already registered in this scope or a parent scope; give a route its own options with config.mailchannelsWebhooks instead'), 'FST_MCWH_ALREADY_REGISTERED')
  }
  const root = rootOf(fastify)
  const rootState = stateOf(root)
  if (!rootState.webhookEvents && fastify.hasRequestDecorator('webhookEvents')) {
    throw coded(new Error('request.webhookEvents is already decorated in this scope (by the app or another plugin), and mailchannels-webhooks sets it to the verified events: ' +
      'remove the other decorator, or register mailchannels-webhooks in a scope without it'), 'FST_MCWH_DECORATOR_PRESENT')
  }
  if (registration === null || typeof registration !== 'object') throw coded(new TypeError('options must be an object'), 'FST_MCWH_INVALID_OPTION')
  validating(() => { rejectUnknownOptions(registration, FASTIFY_REGISTER_OPTIONS) })
  const { path, prefix, ...options } = registration as MailChannelsWebhooksOptions & { prefix?: unknown }
  if ((options as { logger?: unknown }).logger !== undefined) throw coded(new TypeError('logger is not an option of the Fastify plugin: it logs through request.log'), 'FST_MCWH_INVALID_OPTION')
  const keyStoreFor = keyStoreFactory(fastify.log)
  const base = validating(() => resolveReceiverOptions(options, keyStoreFor))
  if (path !== undefined) {
    if (typeof path !== 'string' || !path.startsWith('/')) throw coded(new TypeError("path must be a URL path starting with '/', such as '/webhooks/mailchannels'"), 'FST_MCWH_INVALID_OPTION')
    if (prefix !== undefined && typeof prefix !== 'string') throw coded(new TypeError("prefix must be a string such as '/api' (the webhook route is then POST <prefix><path>)"), 'FST_MCWH_INVALID_OPTION')
    if (base.answer === null) throw coded(new TypeError('path declares a route the plugin answers itself: give handlers (a WebhookEventRouter) or enqueue too, or leave path out and opt your route in with config: { mailchannelsWebhooks: true }'), 'FST_MCWH_INVALID_OPTION')
  }
  if (base.anyCustomer) {
    fastify.log.warn("mailchannels-webhooks: customerHandles is 'any': deliveries signed for any MailChannels customer are accepted")
  }

  const serverBodyLimit = fastify.initialConfig.bodyLimit ?? Infinity

  /**
   * The state of an opted-in route, options validated; throws a coded error naming the route.
   * `appLimit`: the body limit Fastify applies to the route (its `bodyLimit`, else the server's).
   */
  function resolveRoute (method: RouteOptions['method'], url: string, opt: unknown, appLimit: number | undefined): RouteState {
    const methods = asArray(method)
    const route = `${methods.join(',')} ${url}`
    if (opt !== true && (opt === null || typeof opt !== 'object' || Array.isArray(opt))) {
      throw coded(new TypeError(`config.mailchannelsWebhooks of ${route} must be true, false or an options object`), 'FST_MCWH_INVALID_ROUTE')
    }
    if (methods.length !== 1 || methods[0] !== 'POST') {
      throw coded(new Error(`${route} opts in with config.mailchannelsWebhooks, but MailChannels delivers webhooks with POST only: declare the webhook route for POST alone`), 'FST_MCWH_INVALID_ROUTE')
    }
    let routeOptions: WebhookReceiverOptions = { ...options, replay: base.replay ?? false }
    if (opt !== true) {
      const routeOpt = opt as WebhookRouteOptions
      validating(() => { rejectUnknownOptions(routeOpt) })
      // handlers, enqueue (and its timeout) of the route replace the plugin's: never both.
      const ownAnswer = ANSWER_OPTIONS.some((name) => name in routeOpt) ? { handlers: undefined, enqueue: undefined, enqueueTimeout: undefined } : {}
      routeOptions = { ...options, ...ownAnswer, ...routeOpt, replay: 'replay' in routeOpt ? routeOpt.replay : base.replay ?? false } as WebhookReceiverOptions
    }
    // The app's own limit is never loosened: the smaller of the two applies.
    const limit = appLimit ?? serverBodyLimit
    if (limit < validating(() => resolveBodyLimit(routeOptions.bodyLimit))) routeOptions = { ...routeOptions, bodyLimit: limit }
    const pipeline = validating(() => createWebhookPipeline(routeOptions, FASTIFY_PORT, { extra: FASTIFY_REGISTER_OPTIONS, keyStores: () => keyStoreFor, log: fastify.log, warnAnyCustomer: false }))
    if (pipeline.options.anyCustomer && !base.anyCustomer) {
      fastify.log.warn({ url }, "mailchannels-webhooks: customerHandles is 'any' on this route: deliveries signed for any MailChannels customer are accepted")
    }
    return { pipeline, answer: pipeline.options.answer }
  }

  fastify.decorateRequest(kEvents as unknown as string, null)
  fastify.decorateRequest(kAccepted as unknown as string, null)
  if (!rootState.webhookEvents) {
    // At the root, so reading it throws, saying why, in every scope of the app (the plugin's
    // scope and those inside it get it through the prototype chain, whenever they were created).
    root.decorateRequest('webhookEvents', {
      getter (this: FastifyRequest): WebhookEvent[] {
        const events = (this as FastifyRequest & { [kEvents]?: WebhookEvent[] | null })[kEvents]
        if (events === null || events === undefined) throw notVerified(this)
        return events
      },
    } as never)
    rootState.webhookEvents = true
  }

  // Routes declared from now on in this scope and the scopes registered inside it: an opted-in
  // route gets its hooks now (nothing is added to the other routes), options validated at declaration.
  const verified: string[] = []
  const answered: string[] = []
  fastify.addHook('onRoute', (routeOptions) => {
    const opt = optIn(routeOptions.config)
    if (opt === undefined) return
    const state = resolveRoute(routeOptions.method, routeOptions.url ?? '', opt, routeOptions.bodyLimit)
    // A fresh config object per route: a config object shared by two routes must not share state.
    routeOptions.config = { ...routeOptions.config, [kRoute]: state } as typeof routeOptions.config
    pinLast(routeOptions, function verifyMailChannelsDelivery (request: FastifyRequest, reply: FastifyReply, payload: never, done: () => void) {
      receiveDelivery(state, request, reply, payload, done, false)
    })
    routeOptions.onSend = [...asArray(routeOptions.onSend), settleOnSend] as RouteOptions['onSend']
    if (routeOptions.onRequest !== undefined) {
      // The watch's guard, if its onRoute hook ran first: the route is verified now.
      const onRequest = asArray(routeOptions.onRequest as unknown).filter((h) => (h as { [kGuard]?: true })[kGuard] !== true)
      routeOptions.onRequest = (onRequest.length > 0 ? onRequest : undefined) as RouteOptions['onRequest']
    }
    if (state.answer !== null) {
      // The plugin answers: dispatch or enqueue in the handler's place, after the route's own hooks.
      routeOptions.handler = answerHandler(state.answer) as RouteOptions['handler']
      answered.push(`POST ${routeOptions.url}`)
    }
    verified.push(`POST ${routeOptions.url}`)
  })

  // Routes already declared when the plugin loads (`app.register(plugin)` without await, then
  // routes; routes first; scopes registered first) are not seen by onRoute, but this scope's
  // lifecycle hooks still reach them: Fastify adds a scope's hooks to the scopes already inside it
  // and gives a route its scope's hooks when the app starts (fastify.js addHook and lib/route.js
  // in https://github.com/fastify/fastify). Only then does the scope get hooks, which leave other
  // routes after one config read.
  const routesBefore = fastify.printRoutes() !== '(empty tree)'
  if (routesBefore) {
    addScopeHooks(fastify, resolveRoute)
    rootState.covered.push(fastify)
  }
  // Every other opted-in route of the app, whatever its scope and whenever declared: seen at
  // declaration (ready() then refuses it unless a registration verifies it), or, where no onRoute
  // hook can see it, answered 500 before any body is read.
  const scopes = scopesOf(root)
  if (scopes !== null) {
    for (const scope of scopes) watch(scope, rootState, routesBefore)
  } else {
    for (let scope: FastifyInstance | null = fastify; scope !== null; scope = parentOf(scope)) watch(scope, rootState, routesBefore)
  }
  checkAtReady(root, rootState)
  // Routes declared before this registration were seen by no onRoute hook of the plugin, and
  // without Fastify's list of scopes, routes declared later in a scope beside this one are not
  // either; unless the root's scope hooks cover every route (a registration at the root with routes before it).
  if ((routesBefore || scopes === null) && !covers(rootState, root)) guardApp(root, rootState)

  if (path !== undefined) {
    // The plugin's own route, in an encapsulated scope of its own: seen by the onRoute hook above.
    // The registration's prefix applies to it (Fastify does not prefix a fastify-plugin plugin itself).
    fastify.register(async function mailchannelsWebhooksRoute (scope) {
      // Created in this scope after the watch was added: every route in it is seen.
      rootState.watched.add(scope)
      rootState.complete.add(scope)
      scope.post(path, { config: { [KEY]: true } }, async function unreachable () {
        // onRoute replaced this handler; reaching it means the route was not set up.
        throw new VerificationError('configuration_error', 'The webhook route was not set up.')
      })
    }, typeof prefix === 'string' ? { prefix } : {})
  }

  fastify.addHook('onReady', function (ready) {
    if (verified.length > 0) fastify.log.info({ routes: verified }, 'mailchannels-webhooks: verifying MailChannels deliveries on these routes')
    if (answered.length > 0) fastify.log.info({ routes: answered }, 'mailchannels-webhooks: these routes are answered by handlers or enqueue (their own handler does not run)')
    const server = fastify.server as { requestTimeout?: number } | undefined
    if (server?.requestTimeout === 0) {
      fastify.log.warn('mailchannels-webhooks: requestTimeout is 0, so a client can trickle a request body forever; set Fastify({ requestTimeout: 30000, connectionTimeout: 60000 })')
    }
    ready()
  })
}

type ResolveRoute = (method: RouteOptions['method'], url: string, opt: unknown, appLimit: number | undefined) => RouteState

/**
 * Scope hooks for opted-in routes declared before the plugin loaded: their options are
 * validated at their first request (a bad one answers 500 `configuration_error`, logged).
 */
function addScopeHooks (fastify: FastifyInstance, resolveRoute: ResolveRoute): void {
  const states = new WeakMap<object, RouteState | Error>()
  fastify.addHook('preParsing', function verifyEarlyRoute (request, reply, payload, done) {
    const config = request.routeOptions.config as unknown as RouteConfig | undefined
    const opt = optIn(config)
    if (opt === undefined || config![kRoute] !== undefined) {
      done()
      return
    }
    let state = states.get(config!)
    if (state === undefined) {
      try {
        state = resolveRoute(request.routeOptions.method, request.routeOptions.url ?? '', opt, request.routeOptions.bodyLimit)
      } catch (err) {
        state = err as Error
        request.log.error({ err: state.message }, 'mailchannels-webhooks: the options of this webhook route are invalid')
      }
      states.set(config!, state)
    }
    if (state instanceof Error) {
      refuse(request, reply, new VerificationError('configuration_error', 'The server is misconfigured: the options of this webhook route are invalid (see the server log).'))
      return
    }
    // The handler was declared before the plugin could replace it: the plugin answers here.
    receiveDelivery(state, request, reply, payload as never, done as never, true)
  })
  fastify.addHook('onSend', settleOnSend)
}


/** Why `request.webhookEvents` is not set on this request. */
function notVerified (request: FastifyRequest): Error {
  const config = request.routeOptions.config as unknown as RouteConfig | undefined
  if (optIn(config) === undefined) {
    return new Error('request.webhookEvents is only set on a MailChannels webhook route (the route of the plugin\'s path option, or one with config.mailchannelsWebhooks), ' +
      'after the delivery was verified; this route is not a webhook route. Use webhookEventsOf(request) where the events may be absent.')
  }
  return new Error('request.webhookEvents is not set: this request carries no verified delivery (it was refused, or this hook runs before verification, which happens in preParsing; ' +
    'if this route\'s handler reads it, the route was declared where no registration of mailchannels-webhooks reaches it). Use webhookEventsOf(request) where the events may be absent.')
}

/**
 * The MailChannels webhooks plugin for Fastify 5. Opt-in only: a route is a webhook route when
 * the plugin declares it (`path`) or its config says `mailchannelsWebhooks: true` (or an options
 * object). Its exact raw bytes are verified before its handler runs, and the handler reads
 * `request.webhookEvents`. Every other route of the app behaves exactly as without the plugin:
 * it adds no content-type parser, and hooks only to opted-in routes.
 *
 * Fails closed: a webhook route's handler never runs on an unverified body; an opted-in route no
 * registration reaches is refused at `ready()` (`code: 'FST_MCWH_ROUTE_NOT_REACHED'`) or, where
 * the plugin cannot see it, answered 500 `configuration_error`; options are validated at
 * registration and route declaration (`code: 'FST_MCWH_INVALID_OPTION'` / `'FST_MCWH_INVALID_ROUTE'`).
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
