// Which routes of a Fastify app are webhook routes, whatever their scope and whenever declared: the
// opt-in marker (`config.mailchannelsWebhooks`), the watch that sees opted-in routes as they are
// declared, the guards that refuse one no registration verifies, and the pin that keeps the
// verification the route's last preParsing hook. Registration is in ./plugin.ts.
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import { VerificationError } from '../errors.js'
import { refuse, type RouteState } from './hooks.js'

/** The `code` of the errors the plugin throws at registration and route declaration. */
export type MailChannelsWebhooksErrorCode =
  | 'FST_MCWH_INVALID_OPTION'
  | 'FST_MCWH_ALREADY_REGISTERED'
  | 'FST_MCWH_DECORATOR_PRESENT'
  | 'FST_MCWH_INVALID_ROUTE'
  | 'FST_MCWH_ROUTE_NOT_REACHED'

export function coded<E extends Error> (err: E, code: MailChannelsWebhooksErrorCode): E & { code: MailChannelsWebhooksErrorCode } {
  return Object.assign(err, { code })
}

export const KEY = 'mailchannelsWebhooks'
export const kRoute = Symbol('mailchannels-webhooks.route')

export type RouteConfig = Record<string | symbol, unknown> & { [KEY]?: unknown, [kRoute]?: RouteState }

const HOW = 'Declare webhook routes in the scope the plugin is registered in (or a scope registered inside it afterwards), ' +
  "or let the plugin declare the route with its 'path' option."

export function asArray<T> (v: T | T[] | undefined): T[] {
  return v === undefined ? [] : Array.isArray(v) ? v : [v]
}

export function optIn (config: unknown): unknown {
  const opt = (config as RouteConfig | undefined)?.[KEY]
  return opt === false ? undefined : opt
}

/** The scope a scope was created in, null at the root: Fastify builds each encapsulated scope with Object.create(parent). */
export function parentOf (instance: FastifyInstance): FastifyInstance | null {
  const p = Object.getPrototypeOf(instance) as FastifyInstance | null
  return p !== null && typeof p.addHook === 'function' ? p : null
}

/** The root instance. */
export function rootOf (instance: FastifyInstance): FastifyInstance {
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

export function stateOf (root: FastifyInstance): RootState {
  let state = rootStates.get(root)
  if (state === undefined) {
    state = { covered: [], webhookEvents: false, watched: new WeakSet(), complete: new WeakSet(), seen: new Map(), guarding: false, checking: false }
    rootStates.set(root, state)
  }
  return state
}

/** Whether the scope hooks of a registration reach a route declared in `scope` (Fastify builds each scope with Object.create(parent)). */
export function covers (state: RootState, scope: object): boolean {
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
export const kGuard = Symbol('mailchannels-webhooks.guard')

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
export function watch (scope: FastifyInstance, state: RootState, routesBefore: boolean): void {
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
export function scopesOf (root: FastifyInstance): FastifyInstance[] | null {
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
export function checkAtReady (root: FastifyInstance, state: RootState): void {
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
export function guardApp (root: FastifyInstance, state: RootState): void {
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
export function pinLast (routeOptions: RouteOptions, hook: PreParsingHook): void {
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
