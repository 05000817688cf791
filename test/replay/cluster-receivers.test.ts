// Two receiver instances (web handlers, `handlers: router`), each with its own ioredis Cluster
// client, router and stores, sharing a real local Redis Cluster: every event handled exactly
// once across concurrent re-signed copies; a failed handler completed by a resend to the other
// instance; a master cut off from its replica and killed mid-traffic: 503 with Retry-After
// (never a 2xx for events not handled under a claim), recovery with the same clients, and with
// `waitForReplicas` the events of deliveries answered 2xx before the failover are not handled
// again when resent after it.
import t, { type Test } from 'tap'
import type { Cluster } from 'ioredis'
import { RedisClaimStore, WebhookEventRouter, eventFingerprint } from '../../src/index.js'
import { RedisReplayStore } from '../../src/replay/redis-store.js'
import { createWebhookHandler } from '../../src/web/index.js'
import { toEvent } from '../../src/events/parse-events.js'
import { generateSigningKeyPair, signWebhook, type SignedWebhook, type WireEvent } from '../../src/testing/index.js'
import { resigner } from '../helpers/resign.js'
import { clusterUnavailable, startRedisCluster, type LocalRedisCluster } from '../helpers/redis-cluster.js'

const unhandled: unknown[] = []
const onUnhandled = (reason: unknown): void => { unhandled.push(reason) }
process.on('unhandledRejection', onUnhandled)
t.teardown(() => { process.off('unhandledRejection', onUnhandled) })

const KEYS = generateSigningKeyPair()
const HANDLE = 'acct_1'
// Renewed every third of it while handlers run: a process stalled past two thirds of it (a busy
// machine running four test files on two cores) loses its claims to the other instance, which then
// handles those events too. 2 s did lapse under load; a claim held by a failed done mark still
// expires within a resend's patience (45 s).
const CLAIM_LIFETIME = 10
const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

let serial = 0
function wireEvents (types: readonly string[]): WireEvent[] {
  const id = ++serial
  return types.map((event, i) => ({ event, customer_handle: HANDLE, timestamp: 1700000000 + i, request_id: `cluster-${id}-${i}`, email: `person${i}@example.net` }))
}
/** A delivery of `events`, `age` seconds back; every call is a new signature, as a re-signed resend is. */
const sign = resigner(KEYS.privateKey)
/**
 * A retry of a delivery as MailChannels signs it, `age` seconds back. Hundreds of them for one
 * events array (20 copies retried for up to 45 s) cannot each have a second of their own inside
 * maxAge, and need not: two retries that share a signature are one delivery sent twice.
 */
const signRetry = (events: readonly WireEvent[], age: number): SignedWebhook =>
  signWebhook({ privateKey: KEYS.privateKey, events, created: Math.floor(Date.now() / 1000) - age })
const fingerprints = (events: readonly WireEvent[]): string[] => events.map((raw, i) => eventFingerprint(toEvent(raw, i)))

/** What the handlers did, as an external system records it: effects per event fingerprint. */
class Effects {
  readonly #counts = new Map<string, number>()
  readonly failOnce = new Set<string>()
  /** Events whose handler has started (so their claim is held). */
  readonly started = new Set<string>()
  /** While set, handlers wait for it before they record their effect. */
  gate: Promise<void> | null = null
  record (fingerprint: string): void { this.#counts.set(fingerprint, (this.#counts.get(fingerprint) ?? 0) + 1) }
  count (fingerprint: string): number { return this.#counts.get(fingerprint) ?? 0 }
}

interface Answer { status: number, body: Record<string, unknown>, retryAfter: string | null }
interface Instance { post: (d: SignedWebhook) => Promise<Answer> }

/** Instance A and B, each its own Cluster client, router, seen-events and replay store; one cluster. */
async function instances (cluster: LocalRedisCluster, effects: Effects, prefix: string, options: { waitForReplicas?: number, clients?: Cluster[] } = {}): Promise<[Instance, Instance]> {
  const make = async (): Promise<Instance> => {
    const client = await cluster.client()
    options.clients?.push(client)
    const store = { waitForReplicas: options.waitForReplicas ?? 0, waitTimeout: 100, timeout: 2000 }
    const seenEvents = new RedisClaimStore(client, { prefix: `${prefix}seen:`, ...store })
    const handlers = new WebhookEventRouter({ seenEvents, concurrency: 3, claimLifetime: CLAIM_LIFETIME })
      .on('*', async (_event, { fingerprint }) => {
        effects.started.add(fingerprint)
        if (effects.gate !== null) await effects.gate
        else await sleep(1 + Math.floor(Math.random() * 5))
        if (effects.failOnce.delete(fingerprint)) throw new Error('injected handler failure')
        effects.record(fingerprint)
      })
    const replay = new RedisReplayStore(client, { prefix: `${prefix}replay:`, ...store })
    const handler = createWebhookHandler({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], handlers, replay })
    return {
      async post (d) {
        const res = await handler(new Request('http://receiver.test/hook', { method: 'POST', headers: d.headers, body: d.body }))
        return { status: res.status, body: await res.json() as Record<string, unknown>, retryAfter: res.headers.get('retry-after') }
      },
    }
  }
  return [await make(), await make()]
}

/**
 * Posts like MailChannels: retries a 5xx (after a growing, jittered pause), re-signed as the
 * service re-signs its retries, until a 2xx; returns every answer.
 */
async function deliver (instance: Instance, d: SignedWebhook, events: readonly WireEvent[], patienceMs = 45_000): Promise<Answer[]> {
  const answers: Answer[] = []
  // Retries signed 100-249 s back: older than any first delivery here, and far enough inside
  // maxAge (300 s) that a busy machine's seconds between signing and verifying cannot pass it.
  const age = 100 + Math.floor(Math.random() * 50)
  const deadline = Date.now() + patienceMs
  for (let i = 0; ; i++) {
    const answer = await instance.post(i === 0 ? d : signRetry(events, age + Math.min(i, 100)))
    answers.push(answer)
    if (answer.status < 300) return answers
    if (answer.status < 500) throw new Error(`refused ${answer.status} ${JSON.stringify(answer.body)}`)
    if (Date.now() > deadline) break
    // Backing off as MailChannels does (up to 250 ms here): a cluster still healing after a failover
    // (the restarted node resyncing as the new master's replica, clients refreshing their slot map)
    // gets up to 45 s; it takes a few seconds here.
    await sleep(Math.min(20 + i * 5, 250) + Math.floor(Math.random() * 30))
  }
  const codes = [...new Set(answers.map((a) => `${a.status} ${String(a.body.code)}`))]
  throw new Error(`not acknowledged after ${answers.length} attempts in ${patienceMs / 1000} s (answers: ${codes.join(', ')}): ${JSON.stringify(answers.slice(-3))}`)
}

/** Events whose seen-events keys live on all three masters. */
async function spreadEvents (t: Test, cluster: LocalRedisCluster, prefix: string, types: readonly string[]): Promise<WireEvent[]> {
  for (;;) {
    const events = wireEvents(types)
    const masters = new Set(await Promise.all(fingerprints(events).map(async (fp) => await cluster.masterOf(`${prefix}seen:${fp}`))))
    if (masters.size === 3) return events
    t.comment('events on fewer than three masters: drawing new ones')
  }
}

const isRetryable = (a: Answer): boolean => a.status === 503 && a.retryAfter !== null && Number(a.retryAfter) > 0 &&
  ['replay_store_unavailable', 'event_in_progress'].includes(a.body.code as string)

const reason = clusterUnavailable()
t.test('two receivers on a local Redis Cluster', { skip: reason ?? false }, async (t) => {
  const cluster = await startRedisCluster()
  t.teardown(async () => { await cluster.close() })

  t.test('20 concurrent copies of a delivery, identical and re-signed, across both: every event handled exactly once', async (t) => {
    const effects = new Effects()
    const [a, b] = await instances(cluster, effects, 'copies:')
    const events = await spreadEvents(t, cluster, 'copies:', ['delivered', 'open', 'click', 'hard-bounced', 'soft-bounced', 'dropped'])
    const fps = fingerprints(events)
    const original = sign(events)
    const copies = Array.from({ length: 20 }, (_v, i) => (i % 2 === 0 ? original : sign(events, 1 + (i % 7))))
    const results = await Promise.all(copies.map(async (d, i) => await deliver(i % 2 === 0 ? a : b, d, events)))
    t.same(fps.map((fp) => effects.count(fp)), fps.map(() => 1), 'every event handled exactly once')
    t.ok(results.flat().every((r) => r.status === 200 || isRetryable(r)), 'only 200 and 503 with Retry-After were answered')
    t.ok(results.some((r) => (r.at(-1)!.body.skipped as number) > 0), 'resends skipped the events already handled')
    t.same((await b.post(sign(events, 40))).body, { handled: 0, skipped: 6, unhandled: 0 }, 'a later resend skips every event')
  })

  t.test('a failed handler, then a resend to the other instance: only what failed is handled', async (t) => {
    const effects = new Effects()
    const [a, b] = await instances(cluster, effects, 'retry:')
    const events = await spreadEvents(t, cluster, 'retry:', ['delivered', 'open', 'click', 'processed', 'delivered'])
    const fps = fingerprints(events)
    effects.failOnce.add(fps[0]!)
    effects.failOnce.add(fps[3]!)
    const first = await a.post(sign(events))
    t.same([first.status, first.body.code], [500, 'handler_error'])
    t.same(fps.map((fp) => effects.count(fp)), [0, 1, 1, 0, 1], 'the other events were handled')
    const resend = await b.post(sign(events, 5))
    t.same([resend.status, resend.body], [200, { handled: 2, skipped: 3, unhandled: 0 }], 'the resend handles only the two that failed')
    t.same(fps.map((fp) => effects.count(fp)), [1, 1, 1, 1, 1])
  })

  t.test('waitForReplicas 1: a done mark no replica acknowledged is not answered 2xx', async (t) => {
    const effects = new Effects()
    const [a] = await instances(cluster, effects, 'mark:', { waitForReplicas: 1 })
    const events = wireEvents(['delivered'])
    const fp = fingerprints(events)[0]!
    const master = await cluster.masterOf(`mark:seen:${fp}`)
    // Claimed (durably) before the handler runs; the replica is cut off while it runs.
    let open = (): void => {}
    effects.gate = new Promise((resolve) => { open = resolve })
    const answer = a.post(sign(events))
    for (let i = 0; i < 500 && !effects.started.has(fp); i++) await sleep(10)
    t.ok(effects.started.has(fp), 'the claim was acknowledged by the replica and the handler started')
    await cluster.cutOffReplicas(master)
    effects.gate = null
    open()
    const res = await answer
    t.equal(effects.count(fingerprints(events)[0]!), 1, 'the handler ran')
    t.same([res.status, res.body.code], [503, 'replay_store_unavailable'], 'the done mark was not durable: not a 2xx')
    await cluster.reconnectReplicas(master)
    // Its replica back: the events on that master are acknowledged and handled again.
    let later = wireEvents(['open'])
    while (await cluster.masterOf(`mark:seen:${fingerprints(later)[0]!}`) !== master) later = wireEvents(['open'])
    const after = await a.post(sign(later))
    t.same([after.status, after.body], [200, { handled: 1, skipped: 0, unhandled: 0 }], 'replica back: a delivery on that master is handled, 2xx')
  })

  t.test('waitForReplicas 1: a master cut off from its replica, then killed, mid-traffic', async (t) => {
    const effects = new Effects()
    const clients: Cluster[] = []
    const [a, b] = await instances(cluster, effects, 'failover:', { waitForReplicas: 1, clients })
    const victim = (await cluster.nodes()).find((n) => n.role === 'master')!.port

    interface Sent { events: WireEvent[], answer: Answer, phase: 'before' | 'outage' | 'after' }
    const sent: Sent[] = []
    const wrong: unknown[] = []
    let phase: Sent['phase'] = 'before'
    let running = true
    const loops = Array.from({ length: 4 }, async (_v, n) => {
      while (running) {
        const events = wireEvents(['delivered', 'open'])
        try {
          const answer = await (n % 2 === 0 ? a : b).post(sign(events))
          sent.push({ events, answer, phase })
          if (answer.status !== 200 && !isRetryable(answer)) wrong.push(answer)
        } catch (err) {
          wrong.push(err)
        }
        await sleep(5)
      }
    })
    await sleep(500)
    phase = 'outage'
    await cluster.cutOffReplicas(victim)
    await sleep(300)
    await cluster.kill(victim)
    await cluster.waitForPromotion(victim)
    // The promoted replica needs a replica of its own before it can acknowledge: the dead node, back.
    await cluster.restart(victim)
    phase = 'after'
    const okBefore = sent.filter((s) => s.answer.status === 200).length
    for (let i = 0; i < 100 && sent.filter((s) => s.answer.status === 200).length < okBefore + 10; i++) await sleep(100)
    running = false
    await Promise.all(loops)

    t.same(wrong, [], 'every answer was 200, or 503 with Retry-After')
    t.ok(sent.some((s) => s.phase === 'outage' && s.answer.status === 503), 'the outage was answered 503')
    t.ok(sent.some((s) => s.phase === 'after' && s.answer.status === 200), 'then deliveries were handled again, same clients')
    const acked = sent.filter((s) => s.answer.status === 200)
    t.same(acked.filter((s) => s.answer.body.handled !== 2 || s.answer.body.skipped !== 0), [], 'every 2xx handled both events of its delivery')
    t.ok(acked.every((s) => fingerprints(s.events).every((fp) => effects.count(fp) === 1)), 'a 2xx always meant its events were handled, once')

    // Resends of everything: nothing answered 2xx is handled again; everything else is handled once.
    // Re-signed as MailChannels re-signs its retries (signed earlier than any original here).
    const resends = await Promise.all(sent.map(async (s, i) => await deliver(i % 2 === 0 ? b : a, sign(s.events, 50 + (i % 50)), s.events)))
    t.ok(resends.flat().every((r) => r.status === 200 || isRetryable(r)), 'resends are answered 200 or 503 with Retry-After')
    const twice = acked.flatMap((s) => fingerprints(s.events)).filter((fp) => effects.count(fp) !== 1)
    t.same(twice, [], 'events of deliveries answered 2xx before and around the failover were not handled again')
    sent.forEach((s, i) => { if (s.answer.status === 200 && fingerprints(s.events).some((fp) => effects.count(fp) !== 1)) t.comment(JSON.stringify({ phase: s.phase, counts: fingerprints(s.events).map((fp) => effects.count(fp)), resends: resends[i] })) })
    const all = sent.flatMap((s) => fingerprints(s.events))
    t.ok(all.every((fp) => effects.count(fp) >= 1), 'every event was handled in the end')
    sent.forEach((s, i) => { if (!fingerprints(s.events).every((fp) => effects.count(fp) >= 1)) t.comment(JSON.stringify({ s: s.answer, phase: s.phase, counts: fingerprints(s.events).map((fp) => effects.count(fp)), resends: resends[i] })) })
  })

  t.test('no unhandled rejection', async (t) => {
    await sleep(100)
    t.same(unhandled, [])
  })
})
