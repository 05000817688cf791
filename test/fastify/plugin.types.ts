// Compile-time test of the plugin's options and of the route config key: `npx tsc -p tsconfig.json`
// checks it (it is not a runtime test file). Every `@ts-expect-error` line must fail to compile,
// or the type-check fails.
import Fastify from 'fastify'
import mailchannelsWebhooks, { type MailChannelsWebhooksOptions, type WebhookRouteOptions } from '../../src/fastify/index.js'
import { WebhookEventRouter } from '../../src/index.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
const assertType = <T extends true>(_: T): void => {}

export async function options (): Promise<void> {
  const app = Fastify()
  const router = new WebhookEventRouter()
  // The first snippet users see: the plugin declares the route and answers it.
  await app.register(mailchannelsWebhooks, { path: '/webhooks/mailchannels', customerHandles: ['acct_1'], handlers: router })
  await app.register(mailchannelsWebhooks, { customerHandles: 'any', bodyLimit: 512 * 1024, maxAge: 300, prefix: '/hooks' })
  // @ts-expect-error path is a URL path (a string)
  await app.register(mailchannelsWebhooks, { path: 1, customerHandles: ['acct_1'], handlers: router })
  // @ts-expect-error customerHandles is a list of handles or 'any'
  await app.register(mailchannelsWebhooks, { customerHandles: 'acct_1' })
  // @ts-expect-error bodyLimit is a number of bytes
  await app.register(mailchannelsWebhooks, { customerHandles: ['acct_1'], bodyLimit: '1mb' })
  const opts: MailChannelsWebhooksOptions = { customerHandles: ['acct_1'] }
  assertType<Equal<MailChannelsWebhooksOptions['path'], string | undefined>>(true)
  void opts
}

export function routeConfig (): void {
  const app = Fastify()
  app.post('/a', { config: { mailchannelsWebhooks: true } }, async (request) => request.webhookEvents.length)
  app.post('/b', { config: { mailchannelsWebhooks: false } }, async (request) => request.body)
  app.post('/c', { config: { mailchannelsWebhooks: { customerHandles: ['acct_2'], bodyLimit: 1024 } } }, async () => ({}))
  const routeOptions: WebhookRouteOptions = { maxAge: 120 }
  app.post('/d', { config: { mailchannelsWebhooks: routeOptions } }, async () => ({}))
  // @ts-expect-error the key takes true, false or an options object
  app.post('/e', { config: { mailchannelsWebhooks: 'yes' } }, async () => ({}))
  // @ts-expect-error a wrongly typed per-route option
  app.post('/f', { config: { mailchannelsWebhooks: { bodyLimit: '1kb' } } }, async () => ({}))
  // @ts-expect-error customerHandles of a route is a list too
  app.post('/g', { config: { mailchannelsWebhooks: { customerHandles: 'acct_2' } } }, async () => ({}))
}
