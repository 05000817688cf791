// Where the Express middleware (./middleware.ts) puts a delivery's events: `req.webhookEvents`,
// with `webhookEventsOf(req)` to read them where they may be absent.
import type { IncomingMessage } from 'node:http'
import type { WebhookEvent } from '../events/types.js'
import type { WebhookRequest } from './options.js'

/**
 * Requests a mailchannelsWebhooks() already verified. A WeakSet (their events are on
 * `req.webhookEvents`; a WeakMap holding them too measured slower on 1,000-event deliveries), not a mark on
 * the request: Express gives every request and response a prototype of its own app
 * (`Object.setPrototypeOf`), after which V8 shares no hidden class between them, so each property
 * added to one builds a new hidden class (about 1 µs, and garbage). The middleware adds one
 * (`req.webhookEvents`) and writes `res.end` once.
 */
export const verifiedRequests = new WeakSet<object>()

/**
 * The verified events of a request, or `undefined` when no `mailchannelsWebhooks()` verified it
 * (never throws, unlike reading `req.webhookEvents` on a request the middleware let through).
 */
export function webhookEventsOf (req: IncomingMessage): WebhookEvent[] | undefined {
  return verifiedRequests.has(req) ? (req as WebhookRequest).webhookEvents : undefined
}

/** Why `req.webhookEvents` is not set on a request the middleware let through. */
function notVerified (this: IncomingMessage): never {
  throw new Error(`req.webhookEvents is not set: mailchannelsWebhooks() verifies POST requests only and let this ${String(this.method)} request through unverified, ` +
    'so it carries no verified delivery. Declare the webhook route with app.post(path, mailchannelsWebhooks(options), handler) rather than app.all() or app.use(), ' +
    'or use webhookEventsOf(req) where the events may be absent.')
}

/** Assigning it anyway (the app's own value) replaces the throwing getter with a plain property. */
function assignEvents (this: IncomingMessage, value: unknown): void {
  Object.defineProperty(this, 'webhookEvents', { value, writable: true, enumerable: true, configurable: true })
}

/**
 * Marks a request let through unverified: reading `req.webhookEvents` throws, saying why. Not
 * enumerable, so loggers, `JSON.stringify` and `util.inspect` never call it.
 */
export function markUnverified (req: IncomingMessage): void {
  Object.defineProperty(req, 'webhookEvents', { get: notVerified, set: assignEvents, enumerable: false, configurable: true })
}
