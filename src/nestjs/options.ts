// The options of MailChannelsWebhooksModule.forRoot / forRootAsync.
import type { Logger } from '../logger.js'
import type { WebhookReceiverOptions } from '../receiver/options.js'
import type { ClaimStore, TransactionalClaimStore } from '../replay/claim-store.js'

/**
 * What `MailChannelsWebhooksModule.forRoot(options)` takes (or `forRootAsync`'s `useFactory`
 * returns): the options of every receiver (`customerHandles` is required), `enqueue` for a queue,
 * and the `WebhookEventRouter` options of the `@OnWebhookEvent` handlers. Validated once, at
 * start-up, with the receivers' messages.
 */
export interface MailChannelsWebhooksModuleOptions extends Omit<WebhookReceiverOptions, 'handlers'> {
  /**
   * Where rejections, duplicates, key-fetch failures and store failures are logged: any
   * pino-compatible logger, called as `log.info(obj, msg)`.
   * @default Nest's `Logger`, with the context `MailChannelsWebhooks`
   */
  logger?: Logger
  /**
   * Where the events the `@OnWebhookEvent` handlers handled are remembered, for an exactly-once
   * effect per event (`MemoryClaimStore`, `RedisClaimStore`, `postgresSeenEvents` from
   * `mailchannels-webhooks/postgres`, `sqliteSeenEvents` from `mailchannels-webhooks/sqlite`). A
   * transactional store hands each handler its transaction as `context.db`. Needs at least one
   * `@OnWebhookEvent` handler.
   * @default undefined (no store: each handler runs at least once)
   */
  seenEvents?: ClaimStore | TransactionalClaimStore<any>
  /**
   * How many events of one delivery the handlers handle at the same time.
   * @default 1
   */
  concurrency?: number
  /**
   * Seconds a claim on an event lives without renewal (with `seenEvents`); the `Retry-After` of
   * a delivery whose events another delivery is handling.
   * @default 30 (seconds)
   */
  claimLifetime?: number
}
