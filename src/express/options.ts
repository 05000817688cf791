// The types of the Express middleware (./middleware.ts): its options, the request it decorates,
// and the `req.webhookEvents` augmentation of Express's own Request type.
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { WebhookEvent } from '../events/types.js'
import type { Logger } from '../logger.js'
import type { NodeBodyRequest } from '../receiver/node/raw-body.js'
import type { WebhookReceiverOptions } from '../receiver/options.js'

declare const verifiedLocals: unique symbol

/**
 * A type-only mark on `res.locals` that `mailchannelsWebhooks()` puts on the handlers after it
 * on the same route (Express infers one locals type for a route's handlers); no such property
 * exists at run time. It is how `req.webhookEvents` is known to be set there.
 */
export interface WebhookLocals { readonly [verifiedLocals]: true }

declare global {
  // Express's own augmentation point (works with express 4 and 5 types).
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /**
       * The verified, typed events of a MailChannels delivery; set by `mailchannelsWebhooks()`
       * only after verification succeeded. A `WebhookEvent[]` in a handler that follows the
       * middleware on its route (`app.post(path, mailchannelsWebhooks(options), handler)`),
       * possibly undefined anywhere else. On a request the middleware let through unverified
       * (any method but POST, as with `app.all(path, mailchannelsWebhooks(options), handler)`)
       * reading it throws an `Error` saying why, so a handler never goes on without verified
       * events. `webhookEventsOf(req)` never throws.
       */
      webhookEvents: this extends { res?: { locals: WebhookLocals } } ? WebhookEvent[] : WebhookEvent[] | undefined
    }
  }
}

/** Options of the Express middleware: the receiver options plus a logger. */
export interface MailChannelsWebhooksOptions extends WebhookReceiverOptions {
  /**
   * Where rejections, duplicates, key-fetch failures, replay-store failures and startup
   * warnings are logged: the same lines as the Fastify plugin writes to `request.log`. Any
   * pino-compatible logger (`pino()`, or `req.log` style loggers), called as `log.info(obj, msg)`.
   * @default no logging
   */
  logger?: Logger
}

/** The request as the middleware sees it (Express's `Request` fits). */
export type WebhookRequest = NodeBodyRequest & { webhookEvents?: WebhookEvent[] }

/**
 * A connect-style middleware; fits `app.post(path, mailchannelsWebhooks(...), handler)` in
 * express 4 and 5, and a bare `node:http` server. Its second signature only marks the route's
 * `res.locals` type (`WebhookLocals`), so that `req.webhookEvents` is a `WebhookEvent[]` in the
 * handlers after it: Express types infer the route's locals from the last signature.
 */
export interface WebhookMiddleware {
  (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void
  (req: IncomingMessage, res: ServerResponse & { locals: Record<string, any> & WebhookLocals }, next: (err?: unknown) => void): void
}
