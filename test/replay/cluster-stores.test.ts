// Both Redis stores on a real local Redis Cluster (three masters, three replicas): every call
// works (the first seen-events store failed every call with CROSSSLOT: its MGET, DEL and Lua
// spanned the slots of several events), with and without `waitForReplicas`.
import t, { type Test } from 'tap'
import type { Cluster } from 'ioredis'
import { RedisClaimStore, ReplayStoreError, eventFingerprint, type StoreClaim, type StoreClaimResult } from '../../src/index.js'
import { RedisReplayStore } from '../../src/replay/redis-store.js'
import { deliveryId } from '../../src/replay/types.js'
import { toEvent } from '../../src/events/parse-events.js'
import { keySlot } from '../../src/replay/redis-client.js'
import { clusterUnavailable, startRedisCluster, type LocalRedisCluster } from '../helpers/redis-cluster.js'

const unhandled: unknown[] = []
const onUnhandled = (reason: unknown): void => { unhandled.push(reason) }
process.on('unhandledRejection', onUnhandled)
t.teardown(() => { process.off('unhandledRejection', onUnhandled) })

const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }
const isClaim = (r: StoreClaimResult | undefined): r is StoreClaim => typeof r === 'object'
/** 100 real event fingerprints (a delivery's worth), distinct per `round`. */
const fingerprints = (round: string, n = 100): string[] => Array.from({ length: n }, (_v, i) =>
  eventFingerprint(toEvent({ event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000000 + i, request_id: `${round}-${i}` }, 0)))

async function mastersOf (cluster: LocalRedisCluster, keys: readonly string[]): Promise<Set<number>> {
  return new Set(await Promise.all(keys.map(async (k) => await cluster.masterOf(k))))
}

const reason = clusterUnavailable()
t.test('Redis stores on a local Redis Cluster', { skip: reason ?? false }, async (t) => {
  const cluster = await startRedisCluster()
  t.teardown(async () => { await cluster.close() })
  // Semantics, not failure handling: generous timeouts, so a loaded machine cannot fail a call.
  const client = await cluster.client({ redisOptions: { commandTimeout: 5000, maxRetriesPerRequest: 1 } })
  const timeout = 10_000

  t.test('keySlot agrees with CLUSTER KEYSLOT, hash tags included', async (t) => {
    const keys = [...fingerprints('slot', 50).map((fp) => `mailchannels-webhooks:seen:${fp}`), '123456789', '{user1000}.following', '{}x', 'a{}{b}', '{a}{b}', 'héllo {wörld}', '', 'x{', '}{y}']
    const probe = cluster.node(cluster.ports[0]!)
    for (const key of keys) t.equal(keySlot(key), await probe.cluster('KEYSLOT', key), key)
  })

  for (const waitForReplicas of [0, 1]) {
    t.test(`RedisClaimStore, waitForReplicas ${waitForReplicas}: 100 events spread over every master`, async (t) => {
      await seenEventsOnCluster(t, cluster, client, waitForReplicas, timeout)
    })
    t.test(`RedisReplayStore, waitForReplicas ${waitForReplicas}: deliveries on every master`, async (t) => {
      const store = new RedisReplayStore(client, { prefix: `replay-${waitForReplicas}:`, waitForReplicas, timeout })
      const ids = Array.from({ length: 30 }, (_v, i) => deliveryId(Buffer.alloc(64, i)))
      t.equal((await mastersOf(cluster, ids.map((id) => `replay-${waitForReplicas}:${id}`))).size, 3, 'the deliveries live on all three masters')
      t.same(await Promise.all(ids.map(async (id) => await store.claim(id, 60))), ids.map(() => 'claimed'))
      t.same(await Promise.all(ids.map(async (id) => await store.claim(id, 60))), ids.map(() => 'processing'))
      await Promise.all(ids.slice(0, 15).map(async (id) => { await store.complete(id, 60) }))
      await Promise.all(ids.slice(15).map(async (id) => { await store.release(id) }))
      t.same(await Promise.all(ids.map(async (id) => await store.claim(id, 60))), ids.map((_id, i) => i < 15 ? 'done' : 'claimed'),
        'completed deliveries are done, released ones claimed anew')
    })
  }

  t.test('orphaned claims expire on every master', async (t) => {
    const store = new RedisClaimStore(client, { prefix: 'orphan:', timeout })
    const fps = fingerprints('orphan')
    t.ok((await store.claim(fps, 1)).every(isClaim))
    await sleep(1100)
    t.ok((await store.claim(fps, 30)).every(isClaim), 'claimed again once the lifetime passed')
    t.ok((await store.has(fps)).every((done) => !done), 'an expired claim never looks done')
  })

  t.test('waitForReplicas: a master without its replica fails its claims with ReplayStoreError; the others go on', async (t) => {
    const prefix = 'no-replica:'
    const fps = fingerprints('no-replica')
    const nodes = await cluster.nodes()
    const master = await cluster.masterOf(prefix + fps[0]!)
    const replica = nodes.find((n) => n.masterId === nodes.find((m) => m.port === master)?.id)
    if (replica === undefined) return t.fail('the master has a replica')
    await cluster.kill(replica.port)
    const durable = new RedisClaimStore(client, { prefix, waitForReplicas: 1, waitTimeout: 100, timeout })
    const onIt: string[] = []
    const elsewhere: string[] = []
    for (const fp of fps) (await cluster.masterOf(prefix + fp) === master ? onIt : elsewhere).push(fp)
    t.ok(onIt.length > 0 && elsewhere.length > 0)

    const err = await durable.claim(fps, 30).then(() => null, (e: unknown) => e)
    t.ok(err instanceof ReplayStoreError, `a delivery with an event on that master fails: ${String(err)}`)
    t.match(String((err as Error).message), /replicas acknowledged claim/)
    t.ok((await durable.claim(elsewhere, 30)).every(isClaim), 'a delivery whose events live elsewhere is claimed')
    const done = await durable.complete([]).then(() => 'ok')
    t.equal(done, 'ok')
    // The failed claims are given back (best effort, right after the failure): the retry is not held up.
    const plain = new RedisClaimStore(client, { prefix, timeout })
    let retry: StoreClaimResult[] = []
    for (let i = 0; i < 40; i++) {
      retry = await plain.claim(onIt, 30)
      if (retry.every(isClaim)) break
      await sleep(50)
    }
    t.ok(retry.every(isClaim), 'the events of the failed claim can be claimed again')
    t.same(await plain.has(onIt), onIt.map(() => false), 'and none looks done')
  })

  t.test('no unhandled rejection', async (t) => {
    await sleep(100)
    t.same(unhandled, [])
  })
})

async function seenEventsOnCluster (t: Test, cluster: LocalRedisCluster, client: Cluster, waitForReplicas: number, timeout: number): Promise<void> {
  const prefix = `seen-${waitForReplicas}:`
  const store = new RedisClaimStore(client, { prefix, ttl: 600, waitForReplicas, timeout })
  const admin = await cluster.client({ redisOptions: { commandTimeout: 5000, maxRetriesPerRequest: 1 } })
  const fps = fingerprints(`events-${waitForReplicas}`)
  t.equal((await mastersOf(cluster, fps.map((fp) => prefix + fp))).size, 3, 'the 100 events live on all three masters')

  // 20 concurrent claimers of the same delivery: every event claimed exactly once.
  const rounds = await Promise.all(Array.from({ length: 20 }, async () => await store.claim(fps, 30)))
  const won = rounds.flat().filter(isClaim)
  t.same(won.map((c) => c.fingerprint).sort(), [...fps].sort(), 'each event claimed exactly once over 20 concurrent claimers')
  t.ok(rounds.flat().every((r) => isClaim(r) || r === 'processing'), 'the others see processing')
  t.same(await store.has(fps), fps.map(() => false), 'claims are not done marks')

  const pttls = await Promise.all(fps.map(async (fp) => await admin.pttl(prefix + fp)))
  t.ok(pttls.every((ms) => ms > 0 && ms <= 30_000), 'each claim lives its lifetime')

  // Keep half alive; a foreign token extends nothing.
  const byFp = new Map(won.map((c) => [c.fingerprint, c]))
  const claims = fps.map((fp) => byFp.get(fp)!)
  await store.extend(claims.slice(0, 50), 120)
  await store.extend(claims.slice(50).map((c) => ({ fingerprint: c.fingerprint, token: 'someone-else' })), 120)
  const extended = await Promise.all(fps.map(async (fp) => await admin.pttl(prefix + fp)))
  t.ok(extended.slice(0, 50).every((ms) => ms > 30_000), 'extended claims live longer')
  t.ok(extended.slice(50).every((ms) => ms <= 30_000), 'a foreign token extended nothing')

  // Complete the first half, release the second (with a foreign token first: nothing happens).
  await store.release(claims.slice(50).map((c) => ({ fingerprint: c.fingerprint, token: 'someone-else' })))
  t.ok((await store.claim(fps.slice(50), 30)).every((r) => r === 'processing'), 'a foreign token released nothing')
  await store.complete(claims.slice(0, 50))
  await store.release(claims.slice(50))
  t.same(await store.has(fps), fps.map((_fp, i) => i < 50), 'completed events are done')
  const ttls = await Promise.all(fps.slice(0, 50).map(async (fp) => await admin.ttl(prefix + fp)))
  t.ok(ttls.every((s) => s > 590 && s <= 600), 'done marks live the store ttl')
  const again = await store.claim(fps, 30)
  t.ok(again.slice(0, 50).every((r) => r === 'done'), 'a resend skips the completed events')
  t.ok(again.slice(50).every(isClaim), 'and claims the released ones anew')
  await store.release(again.filter(isClaim))

  // The first version's calls, one key per command now.
  const v1 = fingerprints(`v1-${waitForReplicas}`)
  t.same(await store.add(v1), v1.map(() => true))
  t.same(await store.add(v1), v1.map(() => false))
  t.same(await store.has(v1), v1.map(() => true))
  await store.delete(v1)
  t.same(await store.has(v1), v1.map(() => false))
  await admin.set(prefix + 'written-by-v1', '1', 'EX', 60)
  t.same(await store.claim(['written-by-v1'], 30), ['done'], 'a done mark of the first version reads as done')
}
