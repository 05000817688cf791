// Compile-time test of the plugin's type augmentation: `npx tsc -p tsconfig.json` checks it
// (it is not a runtime test file). A broken augmentation fails the type-check.
import Fastify from 'fastify'
import mailchannelsWebhooks, { type WebhookEvent } from '../../src/fastify/index.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
const assertType = <T extends true>(_: T): void => {}

export async function receiver (): Promise<void> {
  const app = Fastify({ logger: true })
  await app.register(mailchannelsWebhooks, { customerHandles: ['abc123'] })
  app.post('/webhooks/mailchannels', { config: { mailchannelsWebhook: true } }, async (request) => {
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
  // Per-route options are typed too.
  app.post('/other', { config: { mailchannelsWebhook: { customerHandles: ['x'], maxAge: 120 } } }, async () => ({}))
  // @ts-expect-error a wrongly typed per-route option
  app.post('/bad', { config: { mailchannelsWebhook: { maxAge: '120' } } }, async () => ({}))
  // @ts-expect-error customerHandles is required
  await app.register(mailchannelsWebhooks, { publicKey: 'x' })
}
