// Two router "instances", each with its own ioredis client and RedisClaimStore, sharing one
// real redis-server: concurrent identical deliveries and resends, injected handler failures,
// claim renewal across instances, Redis going down and coming back.
import t from 'tap'
import { RedisClaimStore, ReplayStoreError, WebhookEventRouter, eventFingerprint } from '../../src/index.js'
import { startRedisServer } from '../replay/helpers/redis-server.js'
import { until } from '../helpers/wait.js'
import { ev, pause, sleep } from './helpers/events.js'
import { concurrentDeliveries, retryCompletesTheRest } from './helpers/scenarios.js'

const redis = await startRedisServer()
t.teardown(async () => { await redis.close() })

let n = 0
/**
 * A fresh instance: its own client, its own store object, a prefix shared with its sibling.
 * Command and store timeouts of 30 s, deadlines for hangs only: a busy machine must not turn a
 * slow answer into a failed event (with Redis stopped, commands still fail at once: no offline queue).
 */
async function instances (count: number): Promise<RedisClaimStore[]> {
  const prefix = `router-test-${++n}:`
  return await Promise.all(Array.from({ length: count }, async () => new RedisClaimStore(await redis.client({ commandTimeout: 30_000 }), { prefix, timeout: 30_000 })))
}

t.test('two instances, many concurrent identical deliveries and resends, handlers failing once: every effect exactly once', async (t) => {
  await concurrentDeliveries(t, { stores: await instances(2) }, { events: 60, deliveries: 30, rounds: 80, failures: 8 })
})

t.test('a retry on the other instance completes only the failed events', async (t) => {
  const [a, b] = await instances(2)
  await retryCompletesTheRest(t, a!, b!)
})

t.test('a claim renewed on one instance keeps the other one off the event', async (t) => {
  const [a, b] = await instances(2)
  let runs = 0
  // The first run works until the test has seen the other instance kept off (a second run, the
  // bug this looks for, returns at once and fails the assertions below rather than hang).
  let finish!: () => void
  const finished = new Promise<void>((resolve) => { finish = resolve })
  const handler = async (): Promise<void> => { if (++runs === 1) await finished }
  // Renewed every second (a third of the lifetime): a renewal may be 2 s late before the claim
  // lapses, which a busy machine does not reach.
  const one = new WebhookEventRouter({ seenEvents: a!, claimLifetime: 3 }).on('delivered', handler)
  const two = new WebhookEventRouter({ seenEvents: b!, claimLifetime: 3 }).on('delivered', handler)
  const events = [ev('delivered', 1)]
  const slow = one.dispatch(events)
  await until(() => runs === 1, 'the first instance to claim the event and run its handler')
  // Past the claim's first lifetime (3 s): a lower bound, so a busy machine only makes it longer.
  await sleep(3200)
  t.same((await two.dispatch(events)).outcomes.map((o) => o.status), ['deferred'], 'still claimed past its first lifetime')
  finish()
  t.equal((await slow).handled, 1)
  t.equal((await two.dispatch(events)).skipped, 1)
  t.equal(runs, 1)
})

t.test('a claim that lapsed while its process was paused, and was taken by the other instance: the paused one fails the event and aborts its handler; the other one acknowledges it', async (t) => {
  const [a, b] = await instances(2)
  let runs = 0
  let reason: unknown
  let taken!: () => void
  const takenByB = new Promise<void>((resolve) => { taken = resolve })
  const one = new WebhookEventRouter({ seenEvents: a!, claimLifetime: 1 }).on('delivered', async (_e, { signal }) => {
    runs++
    await sleep(10) // the dispatch now waits for a handler: its claim is renewed from here on
    pause(1300) // past the claim's 1 s lifetime in Redis, with no renewal able to run
    await takenByB
    for (let i = 0; i < 250 && !signal.aborted; i++) await sleep(20)
    reason = signal.reason
  })
  const two = new WebhookEventRouter({ seenEvents: b!, claimLifetime: 30 }).on('delivered', () => { runs++ })
  const events = [ev('delivered', 1)]
  const paused = one.dispatch(events)
  await until(() => runs === 1, 'the first instance to claim the event and run its handler')
  let other = await two.dispatch(events)
  // The first instance's renewal may have been answered first (then the key is simply gone): either way the event is the other's now.
  for (let i = 0; i < 100 && other.handled === 0; i++) { await sleep(20); other = await two.dispatch(events) }
  t.equal(other.handled, 1, 'the other instance took the lapsed claim and handled the event')
  taken()
  const report = await paused
  t.match(reason, { name: 'ReplayStoreError', operation: 'extend', message: /lapsed/ }, 'the paused handler saw its signal aborted with the lapse')
  t.same(report.outcomes.map((o) => o.status), ['failed'], 'the paused instance does not acknowledge the event (503)')
  t.equal(runs, 2, 'a lease cannot undo the paused handler\'s run: it can only stop it and not acknowledge it')
  t.equal((await two.dispatch(events)).skipped, 1, 'done, by the other instance')
})

t.test('Redis down: events fail with a ReplayStoreError and nothing runs; back up, a retry handles them once', async (t) => {
  const [a] = await instances(1)
  let runs = 0
  const router = new WebhookEventRouter({ seenEvents: a! }).on('*', () => { runs++ })
  const events = [ev('hard-bounced', 1, { status: '5.1.1' }), ev('dropped', 2)]
  await redis.stop()
  t.teardown(async () => { await redis.start() })
  const report = await router.dispatch(events)
  t.equal(report.failed, 2)
  t.ok(report.outcomes.every((o) => o.status === 'failed' && o.error instanceof ReplayStoreError), 'every failure is a ReplayStoreError (answered 503)')
  t.equal(runs, 0)
  await redis.start()
  let retry = await router.dispatch(events)
  // The client reconnects on its own schedule: retry like a sender does, a bounded number of times.
  for (let i = 0; i < 100 && retry.failed > 0; i++) { await sleep(50); retry = await router.dispatch(events) }
  t.equal(retry.handled, 2)
  t.equal(runs, 2)
  t.same(await a!.has(events.map(eventFingerprint)), [true, true])
})
