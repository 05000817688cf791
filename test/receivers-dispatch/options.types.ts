// Compile-time test of the receivers' `handlers` and `enqueue` options: `npx tsc -p tsconfig.json`
// checks it (it is not a runtime test file; the behaviour is in adapters.test.ts and
// options.test.ts). Every `@ts-expect-error` line must fail to compile, or the type-check fails.
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import { WebhookEventRouter } from '../../src/index.js'
import mailchannelsWebhooks, { type EnqueueContext, type EventHandlerContext, type WebhookEvent } from '../../src/fastify/index.js'
import { mailchannelsWebhooks as expressWebhook } from '../../src/express/index.js'
import { mailchannelsWebhooks as honoWebhook } from '../../src/hono/index.js'
import { createWebhookHandler } from '../../src/web/index.js'

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false
const assertType = <T extends true>(_: T): void => {}

export async function handlers (): Promise<void> {
  // A router of the receivers' context reads the key id; a plain router fits as well.
  const router = new WebhookEventRouter<EventHandlerContext>().on('hard-bounced', (event, context) => {
    assertType<Equal<typeof context.keyId, string>>(true)
    return event.email
  })
  const plain = new WebhookEventRouter().on('delivered', () => {})
  // A router whose handlers need context the receivers do not give is refused.
  const needsTenant = new WebhookEventRouter<{ tenant: string }>()

  const app = Fastify()
  await app.register(mailchannelsWebhooks, { customerHandles: ['acct_1'], path: '/webhooks/mailchannels', handlers: router })
  await app.register(mailchannelsWebhooks, { customerHandles: ['acct_1'], handlers: plain })
  // @ts-expect-error the receivers give handlers { keyId }, not { tenant }
  await app.register(mailchannelsWebhooks, { customerHandles: ['acct_1'], handlers: needsTenant })
  app.post('/other', { config: { mailchannelsWebhooks: { handlers: router } } }, () => {})

  express().post('/hook', expressWebhook({ customerHandles: ['acct_1'], handlers: router }))
  new Hono().post('/hook', honoWebhook({ customerHandles: ['acct_1'], handlers: plain }))
  createWebhookHandler({ customerHandles: ['acct_1'], handlers: router })
  // @ts-expect-error a function is not a router
  createWebhookHandler({ customerHandles: ['acct_1'], handlers: async (events: WebhookEvent[]) => events })
  // @ts-expect-error the web handler needs one of onEvents, handlers and enqueue
  createWebhookHandler({ customerHandles: ['acct_1'] })
  // @ts-expect-error and takes only one of them
  createWebhookHandler({ customerHandles: ['acct_1'], handlers: router, onEvents: () => {} })
  // @ts-expect-error enqueueTimeout goes with enqueue only
  createWebhookHandler({ customerHandles: ['acct_1'], handlers: router, enqueueTimeout: 100 })
}

export function enqueue (): void {
  const jobs: Array<{ id: string, event: WebhookEvent }> = []
  createWebhookHandler({
    customerHandles: ['acct_1'],
    enqueueTimeout: 5000,
    enqueue: async (events, context) => {
      assertType<Equal<typeof events, readonly WebhookEvent[]>>(true)
      assertType<Equal<typeof context, EnqueueContext>>(true)
      for (const event of events) jobs.push({ id: context.keyId, event })
    },
  })
  // @ts-expect-error enqueueTimeout is a number of milliseconds
  expressWebhook({ customerHandles: ['acct_1'], enqueue: () => {}, enqueueTimeout: '5s' })
}
