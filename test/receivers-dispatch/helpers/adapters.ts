// Every receiver adapter behind one interface, so the same cases run on each: the Fastify
// plugin (declaring its route with `path`, or a route opting in with per-route config), the
// Express middleware on a real server, the web handler and the Hono middleware. Each endpoint
// records whether anything after the receiver ran (it must not, with handlers or enqueue) and
// everything logged.
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import type { Test } from 'tap'
import plugin from '../../../src/fastify/index.js'
import { mailchannelsWebhooks as expressWebhook } from '../../../src/express/index.js'
import { mailchannelsWebhooks as honoWebhook } from '../../../src/hono/index.js'
import { createWebhookHandler, type WebhookHandlerOptions } from '../../../src/web/index.js'
import type { WebhookReceiverOptions } from '../../../src/receiver/options.js'
import { generateSigningKeyPair, type SignedWebhook, type WireEvent } from '../../../src/testing/index.js'
import { logCapture, recordingLogger } from '../../fastify/helpers/fixtures.js'
import { serve } from '../../express/helpers/server.js'
import { resigner } from '../../helpers/resign.js'

export const KEYS = generateSigningKeyPair()
export const HANDLE = 'acct_1'

let serial = 0

/** Distinct wire events of the allowed customer (a fresh request id per call). */
export function wireEvents (types: readonly string[], extra: Record<string, unknown> = {}): WireEvent[] {
  const id = ++serial
  return types.map((event, i) => ({ event, customer_handle: HANDLE, timestamp: 1700000000 + i, request_id: `req-${id}-${i}`, email: `person${i}@example.net`, ...extra }))
}

/** The events signed as one delivery, `age` seconds in the past; every call is a new signature (test/helpers/resign.ts). */
export const sign = resigner(KEYS.privateKey)

export interface Answer { status: number, body: Record<string, unknown>, retryAfter: string | null }

export interface Endpoint {
  post (d: SignedWebhook): Promise<Answer>
  /** How many times code placed after the receiver (a route handler, `next`) ran. */
  after (): number
  /** Everything logged, as text. */
  logs (): string
}

export type Receiver = Omit<WebhookReceiverOptions, 'customerHandles' | 'publicKey'> & Partial<Pick<WebhookReceiverOptions, 'customerHandles'>>

export const ADAPTERS = ['fastify path', 'fastify route config', 'express', 'web', 'hono'] as const
export type AdapterName = typeof ADAPTERS[number]

async function answerOf (res: Response): Promise<Answer> {
  return { status: res.status, body: await res.json() as Record<string, unknown>, retryAfter: res.headers.get('retry-after') }
}

/** One adapter serving `options` (plus the test key and customer) on POST /hook. */
export async function endpoint (t: Test, adapter: AdapterName, options: Receiver): Promise<Endpoint> {
  const full = { publicKey: KEYS.publicKey, customerHandles: [HANDLE], ...options }
  let after = 0
  if (adapter === 'fastify path' || adapter === 'fastify route config') {
    const capture = logCapture()
    const app = Fastify({ logger: { level: 'debug', stream: capture.stream } })
    if (adapter === 'fastify path') {
      await app.register(plugin, { ...full, path: '/hook' })
    } else {
      const { handlers, enqueue, enqueueTimeout, ...base } = full
      await app.register(plugin, base)
      const own = Object.fromEntries(Object.entries({ handlers, enqueue, enqueueTimeout }).filter(([, v]) => v !== undefined))
      app.post('/hook', { config: { mailchannelsWebhooks: own } }, async () => { after++; return { reached: true } })
    }
    await app.ready()
    t.teardown(() => app.close())
    return {
      async post (d) {
        const res = await app.inject({ method: 'POST', url: '/hook', headers: d.headers, payload: d.body })
        const retryAfter = res.headers['retry-after']
        return { status: res.statusCode, body: res.json(), retryAfter: retryAfter === undefined ? null : String(retryAfter) }
      },
      after: () => after,
      logs: capture.text,
    }
  }
  const { logger, entries } = recordingLogger()
  const logs = (): string => JSON.stringify(entries)
  if (adapter === 'express') {
    const app = express()
    app.post('/hook', expressWebhook({ ...full, logger }), (_req, res) => { after++; res.json({ reached: true }) })
    const port = await serve(t, app)
    return {
      async post (d) { return await answerOf(await fetch(`http://127.0.0.1:${port}/hook`, { method: 'POST', headers: d.headers, body: d.body })) },
      after: () => after,
      logs,
    }
  }
  const request = (d: SignedWebhook): Request => new Request('http://127.0.0.1/hook', { method: 'POST', headers: d.headers, body: d.body })
  if (adapter === 'web') {
    const handler = createWebhookHandler({ ...full, logger } as WebhookHandlerOptions)
    return { post: async (d) => await answerOf(await handler(request(d))), after: () => after, logs }
  }
  const app = new Hono()
  app.post('/hook', honoWebhook({ ...full, logger }), (c) => { after++; return c.json({ reached: true }) })
  return { post: async (d) => await answerOf(await app.request(request(d))), after: () => after, logs }
}

/** Collects the unhandled rejections of the whole file (check them in its last test). */
export function trackUnhandledRejections (t: Test): () => unknown[] {
  const seen: unknown[] = []
  const on = (reason: unknown): void => { seen.push(reason) }
  process.on('unhandledRejection', on)
  t.teardown(() => { process.off('unhandledRejection', on) })
  return () => seen
}
