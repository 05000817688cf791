// A Redis Cluster master dies under claim traffic (docs/replay.md, "Scaling out: one Redis,
// Redis Cluster"). Replication is asynchronous: a write the master acknowledged but did not pass on
// is lost when its replica takes over. Here the master is first cut off from its replica
// while clients still reach it (a partition), then SIGKILLed:
// - without `waitForReplicas`, claims and done marks it acknowledged meanwhile are gone after
//   the failover (the control: it shows the scenario loses writes);
// - with it, such calls fail with ReplayStoreError instead (the receiver answers 503), and
//   everything acknowledged survives;
// - every call fails with ReplayStoreError (no other error, no unhandled rejection) until the
//   replica is promoted, then the same clients and stores work again; with `waitForReplicas`
//   the promoted master needs a replica of its own first (the dead node, restarted).
import t from 'tap'
import {
  RedisClaimStore, ReplayStoreError, eventFingerprint, type StoreClaim, type StoreClaimResult,
} from '../../src/index.js'
import { toEvent } from '../../src/events/parse-events.js'
import { CLUSTER_FAIL_FAST, clusterUnavailable, startRedisCluster, type LocalRedisCluster } from '../helpers/redis-cluster.js'

const unhandled: unknown[] = []
const onUnhandled = (reason: unknown): void => { unhandled.push(reason) }
process.on('unhandledRejection', onUnhandled)
t.teardown(() => { process.off('unhandledRejection', onUnhandled) })

const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }
const isClaim = (r: StoreClaimResult | undefined): r is StoreClaim => typeof r === 'object'
let serial = 0
const fingerprint = (): string => eventFingerprint(toEvent({ event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000000, request_id: `failover-${serial++}` }, 0))

/** `n` fresh fingerprints whose keys (under `prefix`) live on the master `port`, or elsewhere. */
async function fingerprintsOn (cluster: LocalRedisCluster, prefix: string, port: number, n: number, elsewhere = false): Promise<string[]> {
  const out: string[] = []
  while (out.length < n) {
    const fp = fingerprint()
    if ((await cluster.masterOf(prefix + fp) === port) !== elsewhere) out.push(fp)
  }
  return out
}

interface Traffic {
  ok: number
  failed: number
  /** Failures that were not ReplayStoreError, and resolved claims that were wrong. */
  wrong: unknown[]
  /** Claims (and done marks) acknowledged before `ackedUntil`, by the durable store, on the victim. */
  stop: () => Promise<void>
}

/** Deliveries of 10 fresh events, claimed then completed, back to back, by `loops` loops. */
function traffic (store: RedisClaimStore, loops: number, onAck: (claims: StoreClaim[], done: boolean) => void): Traffic {
  let running = true
  const state: Traffic = { ok: 0, failed: 0, wrong: [], stop: async () => { running = false; await all } }
  const all = Promise.all(Array.from({ length: loops }, async () => {
    while (running) {
      const fps = Array.from({ length: 10 }, fingerprint)
      try {
        const claims = await store.claim(fps, 600)
        if (!claims.every(isClaim)) throw new Error(`fresh events answered ${JSON.stringify(claims)}`)
        onAck(claims, false)
        await store.complete(claims)
        onAck(claims, true)
        state.ok++
      } catch (err) {
        state.failed++
        if (!(err instanceof ReplayStoreError)) state.wrong.push(err)
        await sleep(20)
      }
    }
  }))
  return state
}

const reason = clusterUnavailable()
t.test('a master killed mid-traffic', { skip: reason ?? false }, async (t) => {
  const cluster = await startRedisCluster()
  t.teardown(async () => { await cluster.close() })
  // Reads what survived at the end: semantics, not failure handling, so a command timeout a loaded
  // machine cannot reach (the fail-fast 250 ms failed a burst of GETs under load).
  const reader = await cluster.client({ redisOptions: { ...CLUSTER_FAIL_FAST.redisOptions, commandTimeout: 5000 } })
  // WAIT holds the connection it runs on: the store that waits for replicas gets its own client.
  const plain = new RedisClaimStore(await cluster.client(), { prefix: 'plain:' })
  // Replicas acknowledge in well under 800 ms even on a loaded machine; a cut-off master never does.
  // WAIT runs on the store's client, so its command timeout is longer than the wait.
  const durable = new RedisClaimStore(await cluster.client({ redisOptions: { ...CLUSTER_FAIL_FAST.redisOptions, commandTimeout: 2000 } }), { prefix: 'durable:', waitForReplicas: 1, waitTimeout: 800, timeout: 5000 })
  const victim = (await cluster.nodes()).find((n) => n.role === 'master')!.port

  // Done marks written before anything happens, on the victim and elsewhere.
  const before = [...await fingerprintsOn(cluster, 'durable:', victim, 30), ...await fingerprintsOn(cluster, 'durable:', victim, 30, true)]
  const beforeClaims = await durable.claim(before, 600)
  t.ok(beforeClaims.every(isClaim))
  await durable.complete(beforeClaims.filter(isClaim))

  // Background traffic through both stores; the durable store's acknowledgements are recorded.
  const acked = new Map<string, boolean>() // fingerprint -> done mark acknowledged
  let recording = true
  const durableTraffic = traffic(durable, 4, (claims, done) => { if (recording) for (const c of claims) acked.set(c.fingerprint, done) })
  const plainTraffic = traffic(plain, 4, () => {})
  t.teardown(async () => { await Promise.all([durableTraffic.stop(), plainTraffic.stop()]) })
  await sleep(300)

  // The partition: the victim no longer replicates, clients still reach it.
  await cluster.cutOffReplicas(victim)
  const lostPlain = await fingerprintsOn(cluster, 'plain:', victim, 10)
  const plainClaims = await plain.claim(lostPlain, 600)
  t.ok(plainClaims.every(isClaim), 'without waitForReplicas the cut-off master acknowledges claims')
  await plain.complete(plainClaims.filter(isClaim))
  const refused = await fingerprintsOn(cluster, 'durable:', victim, 10)
  const err = await durable.claim(refused, 600).then(() => null, (e: unknown) => e)
  t.ok(err instanceof ReplayStoreError, `with waitForReplicas the claim fails instead: ${String(err)}`)
  const [late] = await durable.claim(await fingerprintsOn(cluster, 'durable:', victim, 1, true), 600)
  t.ok(isClaim(late), 'events on the other masters are claimed meanwhile')

  recording = false
  await cluster.kill(victim)
  const failedAtKill = durableTraffic.failed + plainTraffic.failed
  const promoted = await cluster.waitForPromotion(victim)
  t.not(promoted, victim)
  t.ok(durableTraffic.failed + plainTraffic.failed > failedAtKill, 'calls failed while the master was down')

  // Recovery, same clients and stores: calls on the promoted replica's slots succeed again.
  const until = async (check: () => Promise<boolean>): Promise<boolean> => {
    for (let i = 0; i < 100; i++) {
      if (await check().catch(() => false)) return true
      await sleep(100)
    }
    return false
  }
  const plainAfter = await fingerprintsOn(cluster, 'plain:', promoted, 10)
  t.ok(await until(async () => (await plain.claim(plainAfter, 600)).every(isClaim)), 'the plain store claims on the promoted replica, nothing restarted')
  // The promoted replica has no replica of its own (the dead master was it): a durable claim
  // there fails until one joins it, here the dead node coming back.
  const onPromoted = await fingerprintsOn(cluster, 'durable:', promoted, 10)
  const noReplica = await durable.claim(onPromoted, 600).then(() => null, (e: unknown) => e)
  t.ok(noReplica instanceof ReplayStoreError, `the durable store refuses while the new master has no replica: ${String(noReplica)}`)
  await cluster.restart(victim)
  t.ok(await until(async () => (await durable.claim(onPromoted, 600)).every(isClaim)), 'and claims once the dead node is back as its replica, the client untouched')
  const okAfter = durableTraffic.ok + plainTraffic.ok
  await sleep(500)
  t.ok(durableTraffic.ok + plainTraffic.ok > okAfter, 'the background traffic flows again')
  await Promise.all([durableTraffic.stop(), plainTraffic.stop()])

  t.same(durableTraffic.wrong, [], 'every durable failure was a ReplayStoreError, every resolved claim right')
  t.same(plainTraffic.wrong, [], 'every plain failure was a ReplayStoreError, every resolved claim right')

  // What survived.
  t.same(await durable.claim(before, 600), before.map(() => 'done'), 'done marks written before the failover are still there')
  const ackedFps = [...acked.keys()]
  const values = await Promise.all(ackedFps.map(async (fp) => await reader.get(`durable:${fp}`)))
  const lost = ackedFps.filter((fp, i) => values[i] === null || (acked.get(fp) === true && values[i] !== '1'))
  t.ok(ackedFps.length > 0, `${ackedFps.length} claims acknowledged by the durable store under traffic`)
  t.same(lost, [], 'with waitForReplicas, no acknowledged claim or done mark was lost')
  const plainValues = await Promise.all(lostPlain.map(async (fp) => await reader.get(`plain:${fp}`)))
  t.same(plainValues, lostPlain.map(() => null), 'control: without it, what the cut-off master acknowledged is gone')
  t.ok((await durable.claim(refused, 600)).every(isClaim), 'the refused claims can be made now')

  await sleep(100)
  t.same(unhandled, [], 'no unhandled rejection')
})
