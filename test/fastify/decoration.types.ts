// Compile-time test of the plugin's type augmentation: `npx tsc -p tsconfig.json` checks it
// (it is not a runtime test file). A broken augmentation fails the type-check.
// `request.webhookEvents` is `WebhookEvent[]`, never null: at run time it is set before a
// webhook route's handler runs, and reading it anywhere else throws (test/fastify/routing.test.ts).
// Where the events may be absent (hooks, routes that are not webhook routes), the helper
// `webhookEventsOf(request)` says so in its type.
import Fastify from 'fastify'
import mailchannelsWebhooks, { webhookEventsOf, type WebhookEvent } from '../../src/fastify/index.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
const assertType = <T extends true>(_: T): void => {}

export async function receiver (): Promise<void> {
  const app = Fastify({ logger: true })
  await app.register(mailchannelsWebhooks, { customerHandles: ['abc123'] })
  app.post('/webhooks/mailchannels', { config: { mailchannelsWebhooks: true } }, async (request) => {
    assertType<Equal<typeof request.webhookEvents, WebhookEvent[]>>(true)
    for (const event of request.webhookEvents) {
      if (event.event === 'click') {
        const url: string | undefined = event.url
        void url
      }
      // @ts-expect-error `url` exists only on click events
      void event.url
    }
    return { received: request.webhookEvents.length }
  })
  app.addHook('onResponse', async (request) => {
    const events = webhookEventsOf(request)
    assertType<Equal<typeof events, WebhookEvent[] | undefined>>(true)
    // @ts-expect-error possibly undefined outside a webhook route's handler
    void events.length
  })
  // A POST route that is not a webhook route says so.
  app.post('/login', { config: { mailchannelsWebhooks: false } }, async (request) => request.body)
  // Per-route options are typed too.
  app.post('/other', { config: { mailchannelsWebhooks: { customerHandles: ['x'], maxAge: 120 } } }, async () => ({}))
  // @ts-expect-error a wrongly typed per-route option
  app.post('/bad', { config: { mailchannelsWebhooks: { maxAge: '120' } } }, async () => ({}))
  // @ts-expect-error contentTypes is a list of media types
  app.post('/bad2', { config: { mailchannelsWebhooks: { contentTypes: 'application/json' } } }, async () => ({}))
  // @ts-expect-error customerHandles is required
  await app.register(mailchannelsWebhooks, { publicKey: 'x' })
}
