// The Fastify plugin: options validated once, the request decorators, and which routes are
// webhook routes. Opt-in only: the route the plugin declares (`path`) and routes whose config says
// `mailchannelsWebhooks`. Every other route of the app is left exactly as it was: the plugin adds
// no content-type parser and, in the usual set-up, no hook to the app's scope. The request flow of
// a webhook route is in ./hooks.ts.
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

/** The `code` of the errors the plugin throws at registration and route declaration. */
export type MailChannelsWebhooksErrorCode =
  | 'FST_MCWH_INVALID_OPTION'
  | 'FST_MCWH_ALREADY_REGISTERED'
  | 'FST_MCWH_DECORATOR_PRESENT'
  | 'FST_MCWH_INVALID_ROUTE'
  | 'FST_MCWH_ROUTE_NOT_REACHED'

function coded<E extends Error> (err: E, code: MailChannelsWebhooksErrorCode): E & { code: MailChannelsWebhooksErrorCode } {
  return Object.assign(err, { code })
}

/** Options Fastify itself may pass to a plugin along with ours. */
const FASTIFY_REGISTER_OPTIONS = ['prefix', 'logLevel', 'logSerializers', 'path']

/** The options that say who answers a delivery: a route that sets one of them replaces the plugin's. */
const ANSWER_OPTIONS = ['handlers', 'enqueue', 'enqueueTimeout'] as const

const KEY = 'mailchannelsWebhooks'
const kRoute = Symbol('mailchannels-webhooks.route')

type RouteConfig = Record<string | symbol, unknown> & { [KEY]?: unknown, [kRoute]?: RouteState }

const HOW = 'Declare webhook routes in the scope the plugin is registered in (or a scope registered inside it afterwards), ' +
  "or let the plugin declare the route with its 'path' option."

function asArray<T> (v: T | T[] | undefined): T[] {
  return v === undefined ? [] : Array.isArray(v) ? v : [v]
}

function optIn (config: unknown): unknown {
  const opt = (config as RouteConfig | undefined)?.[KEY]
  return opt === false ? undefined : opt
}

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

/** The scope a scope was created in, null at the root: Fastify builds each encapsulated scope with Object.create(parent). */
function parentOf (instance: FastifyInstance): FastifyInstance | null {
  const p = Object.getPrototypeOf(instance) as FastifyInstance | null
  return p !== null && typeof p.addHook === 'function' ? p : null
}

/** The root instance. */
function rootOf (instance: FastifyInstance): FastifyInstance {
  let root = instance
  for (let p = parentOf(root); p !== null; p = parentOf(p)) root = p
  return root
}

/** What the registrations of one app did at its root (kept per app, made at the first registration). */
interface RootState {
  /** Scopes whose hooks verify the routes in them declared before the plugin loaded (and in scopes inside them). */
  covered: object[]
  /** `request.webhookEvents` is decorated at the root (by the first registration). */
  webhookEvents: boolean
  /** Scopes whose onRoute hooks include the watch (so do the scopes created in them afterwards). */
  watched: WeakSet<object>
  /** Watched scopes that had no route when the watch was added: the watch saw every route declared in them. */
  complete: WeakSet<object>
  /** The opted-in routes the watch saw (their options objects, final once the app starts), and the scope each was declared in. */
  seen: Map<RouteOptions, object>
  /** The app-wide guard is in place. */
  guarding: boolean
  /** The ready() check is in place. */
  checking: boolean
}

const rootStates = new WeakMap<object, RootState>()

function stateOf (root: FastifyInstance): RootState {
  let state = rootStates.get(root)
  if (state === undefined) {
    state = { covered: [], webhookEvents: false, watched: new WeakSet(), complete: new WeakSet(), seen: new Map(), guarding: false, checking: false }
    rootStates.set(root, state)
  }
  return state
}

/** Whether the scope hooks of a registration reach a route declared in `scope` (Fastify builds each scope with Object.create(parent)). */
function covers (state: RootState, scope: object): boolean {
  return state.covered.some((s) => s === scope || Object.prototype.isPrototypeOf.call(s, scope))
}

/** Whether an opted-in route is verified: set up by a registration's onRoute hook, or covered by a registration's scope hooks. */
function isVerified (state: RootState, config: RouteConfig | undefined, scope: object): boolean {
  return config?.[kRoute] !== undefined || covers(state, scope)
}

function notReachedLog (request: FastifyRequest, url: string | undefined): void {
  request.log.error({ url }, `mailchannels-webhooks: this route opts in with config.mailchannelsWebhooks, but no registration of the plugin reaches its scope. ${HOW}`)
}

const NOT_REACHED = 'The server is misconfigured: this webhook route is not verified (see the server log).'

/** Marks the guard the watch gives an opted-in route until a registration sets the route up. */
const kGuard = Symbol('mailchannels-webhooks.guard')

/**
 * Watches `scope` for opted-in routes (each registration watches every scope of the app that
 * exists then, see scopesOf, or at least the registering scope and those above it). Fastify
 * copies a scope's onRoute hooks into a scope only when that scope is created, so a hook added
 * where the plugin is registered alone misses its parent, the scopes beside it and the scopes
 * created before it; added to every existing scope, it reaches every scope created from now on
 * too. An opted-in route the watch sees that no registration sets up gets a guard (answered 500
 * `configuration_error` before any body is read) and makes ready() reject, naming it.
 * `onRegister` marks the scopes created from now on as complete: every route in them is seen,
 * so the app-wide guard, if any, leaves them after one lookup.
 */
function watch (scope: FastifyInstance, state: RootState, routesBefore: boolean): void {
  if (state.watched.has(scope)) return
  state.watched.add(scope)
  if (!routesBefore) state.complete.add(scope)
  scope.addHook('onRoute', function watchMailChannelsRoute (this: FastifyInstance, routeOptions) {
    if (optIn(routeOptions.config) === undefined || state.seen.has(routeOptions)) return
    const declaredIn = this
    state.seen.set(routeOptions, declaredIn)
    // Already set up by a registration whose onRoute hook ran first: nothing to guard.
    if ((routeOptions.config as RouteConfig | undefined)?.[kRoute] !== undefined) return
    // The setup removes this guard if its onRoute hook runs after this one.
    const guard = Object.assign(function guardMailChannelsRoute (request: FastifyRequest, reply: FastifyReply, done: () => void) {
      if (isVerified(state, routeOptions.config as RouteConfig | undefined, declaredIn)) {
        done()
        return
      }
      notReachedLog(request, routeOptions.url)
      refuse(request, reply, new VerificationError('configuration_error', NOT_REACHED))
    }, { [kGuard]: true })
    routeOptions.onRequest = [guard, ...asArray(routeOptions.onRequest)] as RouteOptions['onRequest']
  })
  scope.addHook('onRegister', function markWatched (instance) {
    // Created in a watched scope: it has the watch, and no route yet.
    state.watched.add(instance)
    state.complete.add(instance)
  })
}

/**
 * Every scope of the app, root first, from Fastify's own list of each scope's child scopes (an
 * internal property, read only: https://github.com/fastify/fastify/blob/main/lib/plugin-override.js);
 * null if it cannot be read, and the plugin then guards every request instead (see guardApp).
 */
function scopesOf (root: FastifyInstance): FastifyInstance[] | null {
  const all: FastifyInstance[] = []
  const pending = [root]
  while (pending.length > 0) {
    const scope = pending.pop()!
    all.push(scope)
    const key = Object.getOwnPropertySymbols(scope).find((k) => k.description === 'fastify.children')
    const children = key === undefined ? undefined : (scope as unknown as Record<symbol, unknown>)[key]
    if (!Array.isArray(children)) return null
    for (const child of children) {
      if (child === null || typeof child !== 'object' || typeof (child as FastifyInstance).addHook !== 'function') return null
      pending.push(child as FastifyInstance)
    }
  }
  return all
}

/** Once per app: ready() rejects (`FST_MCWH_ROUTE_NOT_REACHED`), naming them, while opted-in routes the watch saw are not verified. */
function checkAtReady (root: FastifyInstance, state: RootState): void {
  if (state.checking) return
  state.checking = true
  root.addHook('onReady', function (done) {
    const lost = [...state.seen].filter(([r, scope]) => !isVerified(state, r.config as RouteConfig | undefined, scope)).map(([r]) => r).map((r) => `${asArray(r.method).join(',')} ${r.url}`)
    if (lost.length === 0) {
      done()
      return
    }
    const more = lost.length > 5 ? ` (and ${lost.length - 5} more)` : ''
    done(coded(new Error(`mailchannels-webhooks: ${lost.slice(0, 5).join(', ')}${more} opt${lost.length === 1 ? 's' : ''} in with config.mailchannelsWebhooks, but no registration of the plugin reaches ${lost.length === 1 ? 'its scope' : 'their scopes'}. ${HOW}`), 'FST_MCWH_ROUTE_NOT_REACHED'))
  })
}

/**
 * Once per app, at the root, when some opted-in route may have been seen by no onRoute hook (it
 * was declared before a registration, or Fastify's list of scopes could not be read): an
 * onRequest hook, which Fastify gives every scope (those that exist now too, unlike onRoute
 * hooks), answers 500 `configuration_error` to a request for an opted-in route no registration
 * verifies. It runs before any preParsing hook, so no body is read or parsed and the handler
 * does not run. In a complete scope it returns after one lookup.
 */
function guardApp (root: FastifyInstance, state: RootState): void {
  if (state.guarding) return
  state.guarding = true
  // `this` is the scope the route was declared in (Fastify binds a route's hooks to it).
  root.addHook('onRequest', function guardMailChannelsRoutes (this: FastifyInstance, request, reply, done) {
    if (state.complete.has(this)) {
      done()
      return
    }
    const config = request.routeOptions.config as unknown as RouteConfig | undefined
    if (optIn(config) === undefined || isVerified(state, config, this)) {
      done()
      return
    }
    notReachedLog(request, request.routeOptions.url)
    refuse(request, reply, new VerificationError('configuration_error', NOT_REACHED))
  })
}

type PreParsingHook = (request: FastifyRequest, reply: FastifyReply, payload: never, done: () => void) => void

/**
 * Makes `hook` the route's last preParsing hook for good: the route's own preParsing hooks run
 * first, as they would before a parser, and another plugin's onRoute hook running after this
 * one may append to `routeOptions.preParsing` (push or assign) or replace it, but cannot drop
 * the verification or put a hook after it (the property cannot be deleted or redefined).
 * Fastify reads the property when the app starts (lib/route.js in
 * https://github.com/fastify/fastify).
 */
function pinLast (routeOptions: RouteOptions, hook: PreParsingHook): void {
  const hooks: unknown[] = [...asArray(routeOptions.preParsing as unknown), hook]
  Object.defineProperty(routeOptions, 'preParsing', {
    enumerable: true,
    configurable: false,
    get () {
      const at = hooks.indexOf(hook)
      if (at !== hooks.length - 1) {
        hooks.splice(at, 1)
        hooks.push(hook)
      }
      return hooks
    },
    set (value: unknown) {
      hooks.length = 0
      for (const h of asArray(value)) if (h !== hook) hooks.push(h)
      hooks.push(hook)
    },
  })
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
