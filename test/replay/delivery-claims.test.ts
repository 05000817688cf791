// A delivery is a one-key claim (`deliveryClaimKey`) of the same claim store the router claims
// events from (src/replay/delivery-claim.ts). On the memory store, a real Redis and a local
// six-node Redis Cluster: a delivery's claim and its events' claims in one store never meet (a
// delivery done is no event done, and the other way round), and of many concurrent claimers of
// one delivery, on several store instances with clients of their own, exactly one claims it.
// Then through a real Fastify receiver: one RedisClaimStore as `replay` and as the router's
// `seenEvents`.
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import plugin from '../../src/fastify/index.js'
import {
  MemoryClaimStore, RedisClaimStore, WebhookEventRouter, deliveryClaimKey, eventFingerprint,
  type ClaimStore, type StoreClaim, type StoreClaimResult,
} from '../../src/index.js'
import { toEvent } from '../../src/events/parse-events.js'
import { claimDelivery, ClaimSettlement, type ClaimOutcome } from '../../src/replay/delivery-claim.js'
import type { SignedWebhook, WireEvent } from '../../src/testing/index.js'
import { delivery, event, HANDLE, KEYS } from '../fastify/helpers/fixtures.js'
import { clusterUnavailable, startRedisCluster } from '../helpers/redis-cluster.js'
import { startRedisServer } from './helpers/redis-server.js'

const unhandled: unknown[] = []
const onUnhandled = (reason: unknown): void => { unhandled.push(reason) }
process.on('unhandledRejection', onUnhandled)
t.teardown(() => { process.off('unhandledRejection', onUnhandled) })

/** The freshness window the receivers claim a delivery for (maxAge 300 + clockSkew 60 + 1). */
const TTL = 361
const errors: unknown[] = []
const log = { debug: () => {}, info: () => {}, warn: () => {}, error: (o: unknown) => { errors.push(o) } }
const isClaim = (r: StoreClaimResult | undefined): r is StoreClaim => typeof r === 'object'

let serial = 0
/** A real signed delivery of `n` events: its signature bytes and its events' fingerprints. */
function signed (n = 3): { d: SignedWebhook, signature: Uint8Array, fingerprints: string[] } {
  const round = ++serial
  const events: WireEvent[] = Array.from({ length: n }, (_v, i) => event({ request_id: `claims-${round}-${i}` }))
  const d = delivery({ events })
  const header = d.headers.signature
  const signature = Buffer.from(header.slice(header.indexOf('=:') + 2, -1), 'base64')
  return { d, signature, fingerprints: events.map((raw, i) => eventFingerprint(toEvent(raw, i))) }
}

async function claim (store: ClaimStore, signature: Uint8Array): Promise<ClaimOutcome> {
  return await claimDelivery(store, signature, TTL)
}

async function isDone (store: ClaimStore, keys: string[]): Promise<boolean[]> {
  return await store.has(keys)
}

/** The shared assertions: `stores` are instances over one backing store (their own clients). */
function claimTests (t: Test, name: string, stores: () => Promise<ClaimStore[]>): void {
  t.test(`${name}: a delivery's claim and its events' claims do not collide`, async (t) => {
    const [store] = await stores()
    const { signature, fingerprints } = signed()
    const key = deliveryClaimKey(signature)
    t.notOk(fingerprints.includes(key), 'the delivery\'s key is none of its events\' fingerprints')
    const first = await claim(store!, signature)
    if (!first.claimed) throw new Error('a new delivery is claimed')
    t.equal(first.id.fingerprint, key, 'the delivery is claimed under its deliveryClaimKey')
    const events = await store!.claim(fingerprints, 30)
    t.ok(events.every(isClaim), 'its events are still free to claim while the delivery is claimed')
    await store!.complete(events.filter(isClaim))
    t.same(await isDone(store!, [key]), [false], 'its events done: the delivery is not')
    t.same(await claim(store!, signature), { claimed: false, state: 'processing' }, 'the delivery\'s own claim still holds')
    new ClaimSettlement(store!, first.id, TTL, log).settle(200)
    await waitDone(store!, key)
    t.same(await claim(store!, signature), { claimed: false, state: 'done' }, 'the 2xx made the delivery done')

    const other = signed()
    const second = await claim(store!, other.signature)
    if (!second.claimed) throw new Error('a new delivery is claimed')
    new ClaimSettlement(store!, second.id, TTL, log).settle(204)
    await waitDone(store!, deliveryClaimKey(other.signature))
    t.same(await isDone(store!, other.fingerprints), other.fingerprints.map(() => false), 'a delivery done: none of its events is')
    const again = await store!.claim(other.fingerprints, 30)
    t.ok(again.every(isClaim), 'its events are claimed as new')
    await store!.release(again.filter(isClaim))
  })

  t.test(`${name}: of 50 concurrent claimers of one delivery exactly one claims it, until it is settled`, async (t) => {
    const all = await stores()
    const { signature } = signed(1)
    const race = async (): Promise<ClaimOutcome[]> => await Promise.all(Array.from({ length: 50 }, async (_v, i) => await claim(all[i % all.length]!, signature)))
    let outcomes = await race()
    const winners = (o: ClaimOutcome[]): Array<ClaimOutcome & { claimed: true }> => o.filter((x): x is ClaimOutcome & { claimed: true } => x.claimed)
    t.equal(winners(outcomes).length, 1, 'one claim')
    t.same(outcomes.filter((o) => !o.claimed), Array(49).fill({ claimed: false, state: 'processing' }), 'every other claimer sees it processing')
    // The handler failed (a 5xx): the claim is released, and the sender's retry is claimed once again.
    new ClaimSettlement(all[1 % all.length]!, winners(outcomes)[0]!.id, TTL, log).settle(500)
    // The release is sent without waiting (as the receivers settle): claim until it landed.
    for (let i = 0; i < 3000; i++) {
      outcomes = await race()
      if (winners(outcomes).length > 0) break
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
    t.equal(winners(outcomes).length, 1, 'released: one claimer of the retry claims it')
    new ClaimSettlement(all[0]!, winners(outcomes)[0]!.id, TTL, log).settle(200)
    await waitDone(all[0]!, deliveryClaimKey(signature))
    t.same(await race(), Array(50).fill({ claimed: false, state: 'done' }), 'done: every claimer sees it done')
  })
}

async function waitDone (store: ClaimStore, key: string): Promise<void> {
  for (let i = 0; i < 3000; i++) {
    if ((await store.has([key]))[0] === true) return
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  throw new Error('the delivery was never marked done')
}

t.test('the memory claim store', async (t) => {
  const store = new MemoryClaimStore()
  claimTests(t, 'memory', async () => [store])
  t.test('memory: the claim is taken at once (no promise), a copy answered at once', async (t) => {
    const { signature } = signed()
    const first = claimDelivery(store, signature, TTL)
    t.notOk(first instanceof Promise, 'no promise')
    t.same(claimDelivery(store, signature, TTL), { claimed: false, state: 'processing' })
  })
})

t.test('a real redis-server', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const prefix = 'claims:'
  // Semantics, not failure handling: a command timeout a loaded machine cannot reach (the
  // helper's fail-fast default, 250 ms, failed 50 concurrent claimers under load).
  const stores = async (): Promise<ClaimStore[]> => [
    new RedisClaimStore(await redis.client({ commandTimeout: 5000 }), { prefix, timeout: 5000 }),
    new RedisClaimStore(await redis.client({ commandTimeout: 5000 }), { prefix, timeout: 5000 }),
  ]
  claimTests(t, 'redis', stores)

  t.test('redis: the delivery\'s key and its events\' keys are separate Redis keys under one prefix', async (t) => {
    const [store] = await stores()
    const admin = await redis.client()
    const { signature, fingerprints } = signed(2)
    const c = await claim(store!, signature)
    if (!c.claimed) throw new Error('claimed')
    await store!.claim(fingerprints, 30)
    const values = await admin.mget(prefix + deliveryClaimKey(signature), ...fingerprints.map((fp) => prefix + fp))
    t.equal(values.length, 3)
    t.ok(values.every((v) => v !== null && v.startsWith('c:')), 'three keys, each its own claim')
    t.equal(new Set(values).size, 3, 'three different claim tokens')
    t.ok(await admin.pttl(prefix + deliveryClaimKey(signature)) > 300_000, 'the delivery\'s claim lives its freshness window')
  })

  t.test('redis, through a Fastify receiver: one RedisClaimStore as replay and as the router\'s seenEvents', async (t) => {
    const client = await redis.client({ commandTimeout: 5000 })
    const store = new RedisClaimStore(client, { prefix: 'shared:', timeout: 5000 })
    const ran: string[] = []
    const router = new WebhookEventRouter({ seenEvents: store }).on('*', async (_e, { fingerprint }) => { ran.push(fingerprint) })
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: store, handlers: router, path: '/hook' })
    const url = `${await app.listen({ port: 0, host: '127.0.0.1' })}/hook`
    const post = async (d: SignedWebhook): Promise<{ status: number, body: unknown }> => {
      const res = await fetch(url, { method: 'POST', headers: d.headers, body: d.body })
      return { status: res.status, body: await res.json() }
    }
    const events = [event({ request_id: 'shared-1' }), event({ request_id: 'shared-2' })]
    const now = Math.floor(Date.now() / 1000)
    const d = delivery({ events, created: now - 10 })
    t.equal((await post(d)).status, 200)
    t.equal(ran.length, 2, 'both events handled')
    const key = `shared:${deliveryClaimKey(Buffer.from(d.headers.signature.slice(d.headers.signature.indexOf('=:') + 2, -1), 'base64'))}`
    for (let i = 0; i < 3000 && await client.get(key) !== '1'; i++) await new Promise((resolve) => setTimeout(resolve, 10))
    t.equal(await client.get(key), '1', 'the delivery is done in the same store')
    t.same(await post(d), { status: 200, body: { duplicate: true } }, 'an exact resend is a duplicate delivery')
    const resigned = delivery({ events, created: now - 5 })
    t.not(resigned.headers.signature, d.headers.signature, 'a re-signed resend: another signature')
    t.equal((await post(resigned)).status, 200, 'a new delivery')
    t.equal(ran.length, 2, 'whose events were already done: no handler ran again')
  })
})

const reason = clusterUnavailable()
t.test('a local Redis Cluster (three masters, three replicas)', { skip: reason ?? false }, async (t) => {
  const cluster = await startRedisCluster()
  t.teardown(async () => { await cluster.close() })
  const options = { redisOptions: { commandTimeout: 5000, maxRetriesPerRequest: 1 } }
  const stores = async (): Promise<ClaimStore[]> => [
    new RedisClaimStore(await cluster.client(options), { prefix: 'cluster-claims:', timeout: 10_000 }),
    new RedisClaimStore(await cluster.client(options), { prefix: 'cluster-claims:', timeout: 10_000 }),
  ]
  claimTests(t, 'cluster', stores)
})

t.test('no unhandled rejection, no settlement failure logged', async (t) => {
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.same(unhandled, [])
  t.same(errors, [])
})
