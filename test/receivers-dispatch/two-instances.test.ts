// Two receiver instances behind a load balancer (a Fastify app declaring its route with `path`
// and an Express app), each with its own WebhookEventRouter and its own Redis clients, sharing
// one real Redis through RedisClaimStore and RedisReplayStore. Many concurrent identical
// deliveries and re-signed resends across both, retried like MailChannels retries a 5xx: every
// event's handler takes effect exactly once, with injected handler failures the retries complete
// the rest without repeating what was handled, and an event of a customer not allowed runs nothing.
import express from 'express'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import plugin from '../../src/fastify/index.js'
import { mailchannelsWebhooks } from '../../src/express/index.js'
import { RedisClaimStore, WebhookEventRouter, eventFingerprint } from '../../src/index.js'
import { RedisReplayStore } from '../../src/replay/redis-store.js'
import { toEvent } from '../../src/events/parse-events.js'
import type { WebhookReceiverOptions } from '../../src/receiver/options.js'
import type { SignedWebhook, WireEvent } from '../../src/testing/index.js'
import { serve } from '../express/helpers/server.js'
import { startRedisServer, type RedisServer } from '../replay/helpers/redis-server.js'
import { HANDLE, KEYS, sign, trackUnhandledRejections, wireEvents, type Answer } from './helpers/adapters.js'

const unhandled = trackUnhandledRejections(t)
const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

/** What the handlers did, as an external system would record it: effects per event fingerprint. */
class Effects {
  readonly #counts = new Map<string, number>()
  readonly failOnce = new Set<string>()
  injected = 0
  record (fingerprint: string): void { this.#counts.set(fingerprint, (this.#counts.get(fingerprint) ?? 0) + 1) }
  count (fingerprint: string): number { return this.#counts.get(fingerprint) ?? 0 }
  get total (): number { return [...this.#counts.values()].reduce((a, b) => a + b, 0) }
}

interface Instance { name: string, post: (d: SignedWebhook) => Promise<Answer> }
let serial = 0

/** Instances A (Fastify) and B (Express): each its own router and Redis clients, one Redis. */
async function instances (t: Test, redis: RedisServer, effects: Effects, options: { replay?: boolean } = {}): Promise<{ a: Instance, b: Instance, prefix: string }> {
  const prefix = `mcwh-receivers-${++serial}:`
  const stores = async (): Promise<Pick<WebhookReceiverOptions, 'replay' | 'handlers'>> => {
    // A generous command timeout: the machine running the suite may be loaded.
    const client = await redis.client({ commandTimeout: 2000 })
    const seenEvents = new RedisClaimStore(client, { prefix: `${prefix}seen:`, timeout: 2000 })
    const handlers = new WebhookEventRouter({ seenEvents, concurrency: 3, claimLifetime: 5 })
      .on('*', async (_event, { fingerprint }) => {
        // Real asynchrony, so concurrent deliveries overlap in their handlers.
        await sleep(1 + Math.floor(Math.random() * 5))
        if (effects.failOnce.delete(fingerprint)) {
          effects.injected++
          throw new Error('injected handler failure')
        }
        effects.record(fingerprint)
      })
    return { handlers, replay: options.replay === false ? false : new RedisReplayStore(client, { prefix: `${prefix}replay:`, timeout: 2000 }) }
  }
  const common = { publicKey: KEYS.publicKey, customerHandles: [HANDLE] }

  const fastify = Fastify()
  await fastify.register(plugin, { ...common, ...await stores(), path: '/hook' })
  const url = await fastify.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => fastify.close())

  const app = express()
  app.post('/hook', mailchannelsWebhooks({ ...common, ...await stores() }))
  const port = await serve(t, app)

  const poster = (name: string, target: string): Instance => ({
    name,
    async post (d) {
      const res = await fetch(target, { method: 'POST', headers: d.headers, body: d.body })
      return { status: res.status, body: await res.json() as Record<string, unknown>, retryAfter: res.headers.get('retry-after') }
    },
  })
  return { a: poster('fastify', `${url}/hook`), b: poster('express', `http://127.0.0.1:${port}/hook`), prefix }
}

/** The fingerprints of wire events, as the router computes them from the events the receivers parse. */
function fingerprints (events: readonly WireEvent[]): string[] {
  return events.map((raw, i) => eventFingerprint(toEvent(raw, i)))
}

/** Posts like MailChannels: retries a 5xx (after a short, jittered pause here) until a 2xx; returns every answer. */
async function deliver (instance: Instance, d: SignedWebhook, rounds = 60): Promise<Answer[]> {
  const answers: Answer[] = []
  for (let i = 0; i < rounds; i++) {
    const answer = await instance.post(d)
    answers.push(answer)
    if (answer.status < 300) return answers
    if (answer.status < 500) throw new Error(`refused ${answer.status} ${JSON.stringify(answer.body)}`)
    await sleep(5 + Math.floor(Math.random() * 15))
  }
  throw new Error(`not acknowledged after ${rounds} attempts: ${JSON.stringify(answers.slice(-3))}`)
}

t.test('two receivers sharing one Redis', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })

  t.test('20 concurrent identical deliveries and re-signed resends across both, with handler failures: every event takes effect exactly once', async (t) => {
    const effects = new Effects()
    const { a, b } = await instances(t, redis, effects)
    const events = wireEvents(['delivered', 'open', 'click', 'hard-bounced', 'soft-bounced', 'dropped'])
    const fps = fingerprints(events)
    effects.failOnce.add(fps[1]!)
    effects.failOnce.add(fps[4]!)
    const original = sign(events)
    // Half are the very same signed delivery, half re-signed resends (each its own signature).
    const copies = Array.from({ length: 20 }, (_v, i) => (i % 2 === 0 ? original : sign(events, 1 + (i % 7))))
    const results = await Promise.all(copies.map(async (d, i) => await deliver(i % 2 === 0 ? a : b, d)))

    t.same(fps.map((fp) => effects.count(fp)), fps.map(() => 1), 'every event\'s handler took effect exactly once')
    t.equal(effects.injected, 2, 'both injected failures happened')
    const all = results.flat()
    t.ok(all.some((r) => r.status === 500 && r.body.code === 'handler_error'), 'a failing handler was answered 500')
    t.ok(all.every((r) => r.status === 200 || r.status === 500 || (r.status === 503 && ['event_in_progress'].includes(r.body.code as string) && r.retryAfter === '5')),
      'only 200, 500 handler_error and 503 event_in_progress (Retry-After: the claim lifetime) were answered')
    const finals = results.map((r) => r.at(-1)!)
    t.ok(finals.every((r) => r.status === 200), 'every delivery was acknowledged in the end')
    t.ok(finals.some((r) => r.body.duplicate === true), 'identical copies were recognised by the replay store')
    t.ok(finals.some((r) => typeof r.body.skipped === 'number' && r.body.skipped > 0), 'resends skipped events already handled')

    const late = await a.post(sign(events, 30))
    t.same(late, { status: 200, body: { handled: 0, skipped: 6, unhandled: 0 }, retryAfter: null }, 'a later resend skips every event')
    t.same((await b.post(sign(events, 40))).body, { handled: 0, skipped: 6, unhandled: 0 })
    t.equal(effects.total, 6)
  })

  t.test('a delivery whose handlers failed: the retry on the other instance completes the rest, without repeating the handled ones', async (t) => {
    const effects = new Effects()
    const { a, b } = await instances(t, redis, effects)
    const events = wireEvents(['delivered', 'open', 'click', 'processed', 'delivered'])
    const fps = fingerprints(events)
    effects.failOnce.add(fps[0]!)
    effects.failOnce.add(fps[3]!)
    const d = sign(events)
    const first = await a.post(d)
    t.same([first.status, first.body.code], [500, 'handler_error'])
    t.same(fps.map((fp) => effects.count(fp)), [0, 1, 1, 0, 1], 'the other events took effect')
    const retry = await b.post(d)
    t.same(retry, { status: 200, body: { handled: 2, skipped: 3, unhandled: 0 }, retryAfter: null }, 'the identical retry runs only the two that failed')
    t.same(fps.map((fp) => effects.count(fp)), [1, 1, 1, 1, 1])
    t.same((await a.post(d)).body, { duplicate: true }, 'and the delivery is now done')
  })

  t.test('an event of a customer not in customerHandles: 403 on both, no handler runs, nothing is claimed', async (t) => {
    const effects = new Effects()
    const { a, b, prefix } = await instances(t, redis, effects)
    const events = [...wireEvents(['delivered']), ...wireEvents(['open'], { customer_handle: 'acct_other' })]
    for (const instance of [a, b]) {
      const res = await instance.post(sign(events))
      t.same([res.status, res.body.code], [403, 'customer_not_allowed'], instance.name)
    }
    t.equal(effects.total, 0, 'no handler ran, not even for the allowed customer\'s event')
    const admin = await redis.client()
    t.same(await admin.keys(`${prefix}*`), [], 'nothing written to Redis')
  })

  t.test('Redis down: 503 replay_store_unavailable with Retry-After, no handler runs; once it is back the retry is handled once', async (t) => {
    const effects = new Effects()
    // Without a replay store, the seen-events store is what fails.
    const { a, b } = await instances(t, redis, effects, { replay: false })
    const events = wireEvents(['delivered', 'open'])
    await redis.stop()
    for (const instance of [a, b]) {
      const res = await instance.post(sign(events))
      t.same([res.status, res.body.code, res.retryAfter], [503, 'replay_store_unavailable', '10'], instance.name)
    }
    t.equal(effects.total, 0)
    await redis.start()
    const answers = await deliver(b, sign(events, 2), 200)
    t.same(answers.at(-1)!.body, { handled: 2, skipped: 0, unhandled: 0 })
    t.same((await a.post(sign(events, 3))).body, { handled: 0, skipped: 2, unhandled: 0 })
    t.equal(effects.total, 2)
  })
})

t.test('no unhandled rejection', async (t) => {
  t.same(unhandled(), [])
})
