// WebhookEventRouter with a seen-events store (MemoryClaimStore): claim before handlers,
// done mark after, release on failure, renewal while handlers run, store failures.
// The same scenarios across two instances sharing a real Redis are in redis.test.ts.
import t from 'tap'
import { MemoryClaimStore, ReplayStoreError, WebhookEventRouter, eventFingerprint, type ClaimStore, type Logger } from '../../src/index.js'
import { ev, pause, sleep } from './helpers/events.js'
import { concurrentDeliveries, retryCompletesTheRest } from './helpers/scenarios.js'
import { SpyStore } from './helpers/spy-store.js'

function recordingLogger (): Logger & { lines: Array<{ level: string, obj: object, msg: string }> } {
  const lines: Array<{ level: string, obj: object, msg: string }> = []
  const at = (level: string) => (obj: object, msg?: string): void => { lines.push({ level, obj, msg: msg ?? '' }) }
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }
}

t.test('handled, then skipped on a resend; unhandled events are never claimed; one claim call per dispatch', async (t) => {
  const store = new SpyStore()
  let runs = 0
  const router = new WebhookEventRouter({ seenEvents: store }).on(['delivered', 'open'], () => { runs++ })
  const events = [ev('delivered', 1), ev('click', 2), ev('open', 3)]
  const first = await router.dispatch(events)
  t.same(first.outcomes.map((o) => o.status), ['handled', 'unhandled', 'handled'])
  t.equal(store.count('claim'), 1, 'all fingerprints claimed in one call')
  t.same(store.fingerprints('claim'), [eventFingerprint(events[0]!), eventFingerprint(events[2]!)], 'the unhandled click is not claimed')
  t.same(store.fingerprints('complete').sort(), store.fingerprints('claim').sort(), 'both marked done')
  t.same(await store.has(store.fingerprints('claim')), [true, true])

  const resend = await router.dispatch(events.map((e) => structuredClone(e)))
  t.same(resend.outcomes.map((o) => o.status), ['skipped', 'unhandled', 'skipped'])
  t.match(resend, { handled: 0, skipped: 2, unhandled: 1, ok: true })
  t.equal(runs, 2, 'handlers ran once per event')
})

t.test('an event another dispatch is handling is deferred, not run', async (t) => {
  const store = new MemoryClaimStore()
  let release!: () => void
  const gate = new Promise<void>((resolve) => { release = resolve })
  let runs = 0
  const router = new WebhookEventRouter({ seenEvents: store }).on('delivered', async () => { runs++; await gate })
  const events = [ev('delivered', 1)]
  const slow = router.dispatch(events)
  await sleep(10)
  const meanwhile = await router.dispatch(events)
  t.same(meanwhile.outcomes.map((o) => o.status), ['deferred'])
  t.match(meanwhile, { deferred: 1, ok: false })
  release()
  t.equal((await slow).handled, 1)
  t.equal((await router.dispatch(events)).skipped, 1, 'once done, it is skipped')
  t.equal(runs, 1)
})

t.test('a failed handler releases its claim, so the retry runs it; the others are not repeated', async (t) => {
  const store = new MemoryClaimStore()
  await retryCompletesTheRest(t, store, store)
})

t.test('many concurrent identical deliveries and resends, some handlers failing once: every effect exactly once', async (t) => {
  const store = new MemoryClaimStore()
  await concurrentDeliveries(t, { stores: [store, store] }, { events: 40, deliveries: 25, rounds: 60, failures: 6 })
})

t.test('the seen-events store cannot claim: the events to run fail with a ReplayStoreError, no handler runs', async (t) => {
  const down = new ReplayStoreError('claim', 'Redis did not answer claim in time.')
  const store = new SpyStore()
  store.fail.claim = down
  let runs = 0
  const router = new WebhookEventRouter({ seenEvents: store }).on('delivered', () => { runs++ })
  const report = await router.dispatch([ev('delivered', 1), ev('open', 2), ev('delivered', 3)])
  t.same(report.outcomes.map((o) => o.status), ['failed', 'unhandled', 'failed'])
  t.same(report.outcomes.filter((o) => o.status === 'failed').map((o) => o.status === 'failed' && o.error), [down, down])
  t.equal(runs, 0)
  t.notOk(report.ok)

  // A custom store rejecting with anything: still a ReplayStoreError (so receivers answer 503), cause kept.
  const odd = new SpyStore()
  const cause = new Error('socket closed')
  odd.fail.claim = cause
  const r2 = await new WebhookEventRouter({ seenEvents: odd }).on('delivered', () => { runs++ }).dispatch([ev('delivered', 1)])
  const o = r2.outcomes[0]!
  t.ok(o.status === 'failed' && o.error instanceof ReplayStoreError)
  t.match(o.status === 'failed' && o.error, { operation: 'claim', cause })
  t.equal(runs, 0)
})

t.test('a store answering claim wrongly: events fail with a ReplayStoreError, claims it did give are released', async (t) => {
  const inner = new MemoryClaimStore()
  const events = [ev('delivered', 1), ev('delivered', 2)]
  const fps = events.map(eventFingerprint)
  const short = new SpyStore(inner)
  short.claim = async (f, l) => (await inner.claim(f, l)).slice(0, 1)
  let runs = 0
  const report = await new WebhookEventRouter({ seenEvents: short }).on('delivered', () => { runs++ }).dispatch(events)
  t.same(report.outcomes.map((o) => o.status === 'failed' && o.error instanceof ReplayStoreError), [true, true])
  t.equal(runs, 0)
  const again = await inner.claim(fps, 5)
  t.ok(typeof again[0] === 'object', 'the claim the store did give was released')
  t.equal(again[1], 'processing', 'the one the reply dropped stays claimed until it expires (never wrongly released)')
})

t.test('the done mark cannot be written after the handlers succeeded: reported failed with the store error (never acknowledged), logged, never re-run meanwhile', async (t) => {
  const store = new SpyStore()
  store.fail.complete = new ReplayStoreError('complete', 'Redis did not answer complete in time.')
  const log = recordingLogger()
  let runs = 0
  const router = new WebhookEventRouter({ seenEvents: store }).on('delivered', () => { runs++ })
  const events = [ev('delivered', 1)]
  const report = await router.dispatch(events, { log })
  t.match(report, { handled: 0, failed: 1, ok: false })
  t.ok(report.outcomes[0]!.status === 'failed' && report.outcomes[0]!.error instanceof ReplayStoreError, 'failed with the ReplayStoreError: the receivers answer 503')
  t.equal(runs, 1)
  t.match(log.lines, [{ level: 'error', msg: /handled but could not be marked done/, obj: { fingerprints: [eventFingerprint(events[0]!)], err: { type: 'ReplayStoreError' } } }])
  // The claim was not released: a retry meanwhile defers instead of running the handler again.
  delete store.fail.complete
  t.same((await router.dispatch(events)).outcomes.map((o) => o.status), ['deferred'])
  t.equal(runs, 1)
  t.equal(store.count('release'), 0)
})

t.test('a failed release is logged; the event is still reported failed', async (t) => {
  const store = new SpyStore()
  store.fail.release = new ReplayStoreError('release', 'Redis is down.')
  const log = recordingLogger()
  const report = await new WebhookEventRouter({ seenEvents: store }).on('delivered', () => { throw new Error('x') }).dispatch([ev('delivered', 1)], { log })
  t.match(report.outcomes, [{ status: 'failed', error: { message: 'x' } }])
  t.match(log.lines, [{ level: 'warn', msg: /could not be released/ }])
})

t.test('done marks and releases are grouped: a 100-event dispatch costs a few store calls', async (t) => {
  const store = new SpyStore()
  // As over a network: each write takes a while.
  store.delayMs.complete = 5
  store.delayMs.release = 5
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('delivered', () => {})
    .on('dropped', () => { throw new Error('no') })
  const events = Array.from({ length: 100 }, (_, i) => ev(i % 10 === 0 ? 'dropped' : 'delivered', i))
  const report = await router.dispatch(events)
  t.match(report, { handled: 90, failed: 10 })
  t.equal(store.count('claim'), 1)
  t.ok(store.count('complete') <= 3, `complete called ${store.count('complete')} times for 90 events`)
  t.ok(store.count('release') <= 3, `release called ${store.count('release')} times for 10 events`)
  t.equal(store.fingerprints('complete').length, 90)
  t.equal(store.fingerprints('release').length, 10)
  t.equal(store.count('extend'), 0, 'nothing to renew in a quick dispatch')
})

t.test('claims are renewed while a slow handler runs; another dispatch meanwhile is deferred', async (t) => {
  const store = new SpyStore()
  const log = recordingLogger()
  let runs = 0
  let aborted = false
  const router = new WebhookEventRouter({ seenEvents: store, claimLifetime: 1 })
    .on('delivered', async (_e, { signal }) => { runs++; await sleep(1500); aborted = signal.aborted })
  const events = [ev('delivered', 1)]
  const slow = router.dispatch(events, { log })
  // Past the claim's first lifetime: without renewal it would have expired by now.
  await sleep(1200)
  const meanwhile = await router.dispatch(events)
  t.same(meanwhile.outcomes.map((o) => o.status), ['deferred'], 'the claim is still held')
  const report = await slow
  t.equal(report.handled, 1)
  t.equal(runs, 1, 'the handler ran once')
  t.notOk(aborted)
  t.ok(store.count('extend') >= 2, `extended ${store.count('extend')} times`)
  const extends0 = store.count('extend')
  await sleep(700)
  t.equal(store.count('extend'), extends0, 'renewal stops with the dispatch')
  t.same(log.lines, [])
  t.equal((await router.dispatch(events)).skipped, 1)
})

for (const via of ['synchronous', 'promises'] as const) {
  t.test(`a claim lapses while the process is paused (the ${via} store API): that event fails, is never marked done here, its handler sees the signal aborted; a later delivery handles it`, async (t) => {
    const memory = new MemoryClaimStore()
    // A SpyStore makes the router use the store's promises, as it does for Redis or PostgreSQL.
    const store = via === 'synchronous' ? memory : new SpyStore(memory)
    const log = recordingLogger()
    let reason: unknown
    const effects: number[] = []
    const router = new WebhookEventRouter({ seenEvents: store, claimLifetime: 1 })
      .on('delivered', async (e, { signal }) => {
        effects.push(e.timestamp)
        if (e.timestamp !== 1700000002 || effects.length > 2) return
        await sleep(10) // the dispatch now waits for a handler: its held claims are renewed from here on
        pause(1300) // past the claim's 1 s lifetime, with no renewal able to run
        // A cooperative handler stops when the signal aborts (bounded wait).
        for (let i = 0; i < 100 && !signal.aborted; i++) await sleep(20)
        reason = signal.reason
        // ...and resolves: the event must still not count as handled here.
      })
    const events = [ev('delivered', 1), ev('delivered', 2), ev('delivered', 3)]
    const report = await router.dispatch(events, { log })
    // Events 2 and 3 were claimed with event 1, at the start: both claims lapsed in the pause.
    t.match(reason, { name: 'ReplayStoreError', operation: 'extend', message: /^2 webhook event claims lapsed while the delivery's handlers ran/ }, 'the signal was aborted with the lapse')
    t.same(report.outcomes.map((o) => o.status), ['handled', 'failed', 'failed'], 'the event handled before the pause stays handled; the lapsed ones fail')
    t.same(report.outcomes.map((o) => o.status === 'failed' && o.error), [false, reason, reason], 'with the lapse (503, retried), though the paused handler resolved')
    t.match(log.lines, [{ level: 'error', msg: /lapsed while their handlers ran/, obj: { fingerprints: [eventFingerprint(events[1]!), eventFingerprint(events[2]!)] } }])
    t.equal(log.lines.length, 1)
    t.same(await memory.has(events.map(eventFingerprint)), [true, false, false], 'only the handled event is marked done')
    t.same(effects, [1700000001, 1700000002])
    const retry = await router.dispatch(events)
    t.same(retry.outcomes.map((o) => o.status), ['skipped', 'handled', 'handled'], 'a retry handles the two failed events')
    t.same(effects, [1700000001, 1700000002, 1700000002, 1700000003])
  })
}

t.test('what a store answers extend with: nothing (a custom store written before extend answered) keeps the dispatch going; anything but one boolean per claim gives it up', async (t) => {
  for (const [answer, givenUp] of [[undefined, false], [[true], false], ['OK', true], [[], true], [[1], true]] as const) {
    const memory = new MemoryClaimStore()
    const store: ClaimStore = {
      has: async (fps) => await memory.has(fps),
      add: async (fps) => await memory.add(fps),
      delete: async (fps) => { await memory.delete(fps) },
      claim: async (fps, lifetime) => await memory.claim(fps, lifetime),
      complete: async (claims) => { await memory.complete(claims) },
      release: async (claims) => { await memory.release(claims) },
      extend: async (claims, lifetime) => { await memory.extend(claims, lifetime); return answer as never },
    }
    const log = recordingLogger()
    let aborted: unknown
    const router = new WebhookEventRouter({ seenEvents: store, claimLifetime: 1 })
      .on('delivered', async (_e, { signal }) => { await sleep(800); aborted = signal.reason })
    const report = await router.dispatch([ev('delivered', 1)], { log })
    const what = JSON.stringify(answer) ?? 'undefined'
    if (givenUp) {
      t.match(aborted, { name: 'ReplayStoreError', operation: 'extend', message: /answered extend with an unexpected result/ }, `${what}: the signal aborts`)
      t.match(log.lines, [{ level: 'error', msg: /could not be renewed/ }], `${what}: logged`)
    } else {
      t.equal(aborted, undefined, `${what}: the dispatch goes on`)
      t.same(log.lines, [], `${what}: nothing logged`)
      t.equal(report.handled, 1)
    }
  }
})

t.test('renewal fails: the signal is aborted, events not started fail and are released', async (t) => {
  const store = new SpyStore()
  const down = new ReplayStoreError('extend', 'Redis is down.')
  store.fail.extend = down
  const log = recordingLogger()
  let reason: unknown
  const ran: number[] = []
  const router = new WebhookEventRouter({ seenEvents: store, claimLifetime: 1 })
    .on('delivered', async (e, { signal }) => {
      ran.push(e.timestamp)
      // A cooperative handler stops when the signal aborts (bounded wait).
      for (let i = 0; i < 100 && !signal.aborted; i++) await sleep(20)
      reason = signal.reason
      throw signal.reason
    })
  const events = [ev('delivered', 1), ev('delivered', 2)]
  const report = await router.dispatch(events, { log })
  t.equal(ran.length, 1, 'the second event was not started')
  t.equal(reason, down, 'the handler saw the signal aborted with the store error')
  t.same(report.outcomes.map((o) => o.status === 'failed' && o.error), [down, down])
  t.match(log.lines, [{ level: 'error', msg: /could not be renewed/ }])
  t.same(store.fingerprints('release').sort(), events.map(eventFingerprint).sort(), 'both claims released')
  delete store.fail.extend
  let runs = 0
  const retry = await new WebhookEventRouter({ seenEvents: store }).on('delivered', () => { runs++ }).dispatch(events)
  t.equal(retry.handled, 2, 'a retry handles them')
  t.equal(runs, 2)
})

t.test('duplicates in one delivery are claimed once', async (t) => {
  const store = new SpyStore()
  let runs = 0
  const router = new WebhookEventRouter({ seenEvents: store, concurrency: 3 }).on('open', () => { runs++ })
  const report = await router.dispatch([ev('open', 1), ev('open', 1), ev('open', 2)])
  t.same(report.outcomes.map((o) => o.status), ['handled', 'skipped', 'handled'])
  t.equal(store.fingerprints('claim').length, 2)
  t.equal(runs, 2)
})

t.test('the memory store as it is (answered synchronously): copies in one delivery are claimed once, and report as their first copy', async (t) => {
  const store = new MemoryClaimStore()
  let runs = 0
  const router = new WebhookEventRouter({ seenEvents: store }).on('open', () => { runs++ })
  const report = await router.dispatch([ev('open', 1), ev('open', 1), ev('open', 2), ev('open', 1)])
  t.same(report.outcomes.map((o) => o.status), ['handled', 'skipped', 'handled', 'skipped'])
  t.equal(runs, 2)
  t.equal(store.size, 2, 'one entry per distinct event')

  const failing = new WebhookEventRouter({ seenEvents: store }).on('click', () => { throw new Error('no') })
  const bad = await failing.dispatch([ev('click', 1), ev('click', 1)])
  t.same(bad.outcomes.map((o) => o.status === 'failed' && (o.error as Error).message), ['no', 'no'], 'a copy of a failed event fails with its error')
  t.equal(typeof (await store.claim([eventFingerprint(ev('click', 1))], 5))[0], 'object', 'the failed event was released')

  const again = await router.dispatch([ev('open', 2), ev('open', 2)])
  t.same(again.outcomes.map((o) => o.status), ['skipped', 'skipped'], 'a copy of a skipped event is skipped')
})

t.test('the memory store as it is: events handled before a slow one are marked done while it runs', async (t) => {
  const store = new MemoryClaimStore()
  let release!: () => void
  const gate = new Promise<void>((resolve) => { release = resolve })
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('delivered', () => {})
    .on('open', async () => { await gate })
  const slow = router.dispatch([ev('delivered', 1), ev('delivered', 2), ev('open', 3)])
  await sleep(5)
  const meanwhile = await router.dispatch([ev('delivered', 1), ev('delivered', 2), ev('open', 3)])
  t.same(meanwhile.outcomes.map((o) => o.status), ['skipped', 'skipped', 'deferred'], 'the quick ones are done, the slow one still claimed')
  release()
  t.match(await slow, { handled: 3, ok: true })
})

t.test('the memory store as it is: an event handled once the dispatch waits is marked done while a later one runs', async (t) => {
  const store = new MemoryClaimStore()
  let release!: () => void
  const gate = new Promise<void>((resolve) => { release = resolve })
  let opened!: () => void
  const openStarted = new Promise<void>((resolve) => { opened = resolve })
  const router = new WebhookEventRouter({ seenEvents: store })
    .on('delivered', async () => { await sleep(1) })
    .on('open', async () => { opened(); await gate })
  const slow = router.dispatch([ev('delivered', 1), ev('open', 2)])
  await openStarted
  const meanwhile = await router.dispatch([ev('delivered', 1), ev('open', 2)])
  t.same(meanwhile.outcomes.map((o) => o.status), ['skipped', 'deferred'], 'the first is done, the second still claimed')
  release()
  t.match(await slow, { handled: 2, ok: true })
})

t.test('the report: outcomes are built when read, the same array every time, and are in a copy or JSON of the report', async (t) => {
  const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore() }).on('open', () => {})
  const events = [ev('open', 1), ev('click', 2)]
  const report = await router.dispatch(events)
  t.equal(report.outcomes, report.outcomes)
  t.same({ ...report }.outcomes.map((o) => o.status), ['handled', 'unhandled'])
  t.same(JSON.parse(JSON.stringify(report)).outcomes.map((o: { fingerprint: string }) => o.fingerprint), events.map(eventFingerprint))
  t.same(Object.keys(report), ['outcomes', 'handled', 'skipped', 'unhandled', 'deferred', 'failed', 'parked', 'ok'])
  t.equal(Object.getOwnPropertyDescriptor(report, 'outcomes')?.enumerable, true, 'an own enumerable property')

  // Every report reads its own events, whichever is read first.
  const others = [ev('click', 3), ev('open', 4), ev('open', 4)]
  const other = await router.dispatch(others)
  t.same(other.outcomes.map((o) => o.status), ['unhandled', 'handled', 'skipped'])
  t.same(other.outcomes.map((o) => o.event), others)
  t.same(report.outcomes.map((o) => o.event), events)
  t.not(other.outcomes, report.outcomes)
})

t.test('a full memory store forgets the oldest events first, delivery after delivery, and stays at its max', async (t) => {
  const store = new MemoryClaimStore({ max: 100 })
  const router = new WebhookEventRouter({ seenEvents: store }).on('delivered', () => {})
  const delivery = (d: number): ReturnType<typeof ev>[] => Array.from({ length: 30 }, (_, i) => ev('delivered', d * 1000 + i))
  for (let d = 0; d < 20; d++) {
    t.equal((await router.dispatch(delivery(d))).handled, 30)
    t.ok(store.size <= 100, `size ${store.size} after delivery ${d}`)
  }
  // 600 events went in: the last 100 are remembered (the newest three deliveries and part of the fourth newest).
  t.equal((await router.dispatch(delivery(19))).skipped, 30, 'the newest delivery is remembered')
  t.equal((await router.dispatch(delivery(17))).skipped, 30)
  t.equal((await router.dispatch(delivery(0))).handled, 30, 'the oldest was forgotten')
})
