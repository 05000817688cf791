// WebhookEventRouter without a seen-events store: typed registration, order, concurrency,
// statuses, context, argument and option checks. The store part is in exactly-once.test.ts.
import t from 'tap'
import { WebhookEventRouter, eventFingerprint, MemoryClaimStore, type WebhookEvent, type Logger } from '../../src/index.js'
import { ev, sleep } from './helpers/events.js'

t.test('a handler gets the events of its type, narrowed, with the event fingerprint', async (t) => {
  const seen: string[] = []
  const router = new WebhookEventRouter()
    .on('hard-bounced', (e, { fingerprint }) => {
      seen.push(`bounce ${e.status ?? ''} ${fingerprint === eventFingerprint(e) ? 'fp' : 'bad-fp'}`)
    })
  const events = [ev('delivered', 1), ev('hard-bounced', 2, { status: '5.1.1' }), ev('open', 3)]
  const report = await router.dispatch(events)
  t.same(seen, ['bounce 5.1.1 fp'])
  t.same(report.outcomes.map((o) => o.status), ['unhandled', 'handled', 'unhandled'])
  t.same(report.outcomes.map((o) => o.event), events, 'outcomes carry the events, in the order given')
  t.same(report.outcomes.map((o) => o.fingerprint), events.map(eventFingerprint))
  t.match(report, { handled: 1, skipped: 0, unhandled: 2, deferred: 0, failed: 0, ok: true })
})

t.test('several types at once, "*" for every event (unknown types too), "unknown" for new types', async (t) => {
  const calls: string[] = []
  const router = new WebhookEventRouter()
    .on(['open', 'click'], (e) => { calls.push(`engagement:${e.event}`) })
    .on('*', (e) => { calls.push(`all:${e.event}`) })
    .on('unknown', (e) => { calls.push(`unknown:${e.eventName}:${String(e.fields.score)}`) })
  const report = await router.dispatch([ev('click', 1, { url: 'https://x.test' }), ev('open', 2), ev('spam-scored', 3, { score: 7 }), ev('delivered', 4)])
  t.same(calls, [
    'engagement:click', 'all:click',
    'engagement:open', 'all:open',
    'all:unknown', 'unknown:spam-scored:7',
    'all:delivered',
  ], 'handlers of one event run in registration order, events in the order given')
  t.equal(report.handled, 4)
  t.ok(report.ok)
})

t.test('a type listed twice in one on() registers the handler once', async (t) => {
  let n = 0
  const router = new WebhookEventRouter().on(['open', 'open'], () => { n++ })
  await router.dispatch([ev('open', 1)])
  t.equal(n, 1)
})

t.test('several handlers of one event run one after the other; the first failure stops the rest', async (t) => {
  const log: string[] = []
  const boom = new Error('first handler failed')
  const router = new WebhookEventRouter()
    .on('delivered', async () => { log.push('a start'); await sleep(20); log.push('a end') })
    .on('delivered', async () => { log.push('b') })
    .on('dropped', async () => { throw boom })
    .on('dropped', () => { log.push('never') })
  const report = await router.dispatch([ev('delivered', 1), ev('dropped', 2), ev('delivered', 3)])
  t.same(log, ['a start', 'a end', 'b', 'a start', 'a end', 'b'])
  t.same(report.outcomes.map((o) => o.status), ['handled', 'failed', 'handled'], 'one failed event does not stop the others')
  const failed = report.outcomes[1]!
  t.equal(failed.status === 'failed' && failed.error, boom, 'the error is the one the handler threw')
  t.match(report, { handled: 2, failed: 1, ok: false })
})

t.test('a handler that throws synchronously, or rejects with a non-Error, fails its event; dispatch never rejects', async (t) => {
  const router = new WebhookEventRouter()
    .on('open', () => { throw new TypeError('sync') })
    // eslint-disable-next-line prefer-promise-reject-errors
    .on('click', async () => await Promise.reject('a string'))
  const report = await router.dispatch([ev('open', 1), ev('click', 2)])
  t.same(report.outcomes.map((o) => o.status === 'failed' ? o.error : o.status), [new TypeError('sync'), 'a string'])
  t.equal(report.failed, 2)
})

t.test('no events: an empty, ok report', async (t) => {
  const report = await new WebhookEventRouter().on('*', () => {}).dispatch([])
  t.same(report, { outcomes: [], handled: 0, skipped: 0, unhandled: 0, deferred: 0, failed: 0, parked: 0, ok: true })
})

t.test('concurrency bounds the events in flight; default 1 keeps the order', async (t) => {
  for (const concurrency of [undefined, 3]) {
    let inFlight = 0
    let max = 0
    const started: number[] = []
    const router = new WebhookEventRouter(concurrency === undefined ? {} : { concurrency })
      .on('delivered', async (e) => {
        started.push(e.timestamp - 1700000000)
        inFlight++
        max = Math.max(max, inFlight)
        await sleep(10 + (e.timestamp % 3) * 5)
        inFlight--
      })
    const events = Array.from({ length: 12 }, (_, i) => ev('delivered', i))
    const report = await router.dispatch(events)
    t.equal(report.handled, 12)
    t.equal(max, concurrency ?? 1, `at most ${concurrency ?? 1} in flight, and that many reached`)
    t.same(started, events.map((_, i) => i), 'events start in the order given')
  }
})

t.test('handlers get the caller context, the fingerprint, a signal and a logger', async (t) => {
  const lines: string[] = []
  const log: Logger = { debug: () => {}, info: (_o, m) => { lines.push(m ?? '') }, warn: () => {}, error: () => {} }
  const contexts: unknown[] = []
  const router = new WebhookEventRouter<{ keyId: string }>()
    .on('open', (e, context) => {
      contexts.push(context)
      context.log.info({}, `open for ${context.keyId}`)
      t.equal(context.signal.aborted, false)
    })
  await router.dispatch([ev('open', 1)], { keyId: 'k-1', log })
  t.same(lines, ['open for k-1'])
  t.match(contexts[0], { keyId: 'k-1', fingerprint: eventFingerprint(ev('open', 1)), log })

  // Without a logger, handlers get one that logs nothing.
  let quiet: Logger | undefined
  await new WebhookEventRouter().on('open', (_e, c) => { quiet = c.log }).dispatch([ev('open', 1)])
  t.type(quiet?.error, 'function')
  t.doesNotThrow(() => quiet!.error({ x: 1 }, 'nothing'))
})

t.test('the context is a plain object whose own keys are the caller context, fingerprint, signal and log, in every dispatch size', async (t) => {
  // Small dispatches make the signal only when a handler reads it; large ones up front: a
  // handler sees the same context either way.
  for (const size of [1, 4, 16, 17, 40]) {
    const contexts: Array<Record<PropertyKey, unknown>> = []
    const copies: Array<Record<PropertyKey, unknown>> = []
    const tag = Symbol('tag')
    const router = new WebhookEventRouter<{ keyId: string, [tag]: number }>()
      .on('open', (_e, context) => {
        contexts.push(context)
        copies.push({ ...context })
      })
    const events = Array.from({ length: size }, (_, i) => ev('open', i))
    const report = await router.dispatch(events, { keyId: 'k-1', [tag]: 7 })
    t.equal(report.handled, size)
    const [first] = contexts
    t.same(Reflect.ownKeys(first!), ['keyId', 'fingerprint', 'signal', 'log', tag], `${size} events: own keys in spread order`)
    t.equal(Object.getPrototypeOf(first), Object.prototype, `${size} events: a plain object`)
    t.equal(JSON.stringify(Object.keys(first!)), '["keyId","fingerprint","signal","log"]')
    t.same(contexts.map((c) => c.fingerprint), events.map(eventFingerprint))
    for (const [k, copy] of copies.entries()) {
      t.ok(copy.signal instanceof AbortSignal, `${size} events: a spread copy carries the signal`)
      t.equal(copy.signal, contexts[k]!.signal)
      t.equal(copy[tag], 7)
    }
    t.ok(contexts.every((c) => c.signal === first!.signal), `${size} events: one signal per dispatch`)
    t.equal((first!.signal as AbortSignal).aborted, false)
    // Writable as a plain property.
    first!.signal = 'replaced'
    t.equal(first!.signal, 'replaced')
    t.ok(contexts.slice(1).every((c) => c.signal instanceof AbortSignal))
  }
})

t.test('a handler that reads the signal only after the dispatch was given up sees it aborted', async (t) => {
  for (const size of [2, 20]) {
    const controller = new AbortController()
    const kept: Array<{ signal: AbortSignal }> = []
    const router = new WebhookEventRouter()
      .on('delivered', async (_e, context) => {
        kept.push(context)
        if (kept.length === 1) {
          await sleep(1)
          controller.abort(new Error('gone'))
        }
      })
    const report = await router.dispatch(Array.from({ length: size }, (_, i) => ev('delivered', i)), { signal: controller.signal })
    t.equal(kept.length, 1)
    t.equal(report.failed, size - 1)
    // Read for the first time here, after the dispatch ended.
    t.equal(kept[0]!.signal.aborted, true, `${size} events`)
    t.match(kept[0]!.signal.reason, { message: 'gone' })
  }
})

t.test('aborting the caller signal: running handlers see it, events not started fail with its reason', async (t) => {
  const controller = new AbortController()
  const ran: number[] = []
  let sawAbort = false
  const router = new WebhookEventRouter()
    .on('delivered', async (e, { signal }) => {
      ran.push(e.timestamp)
      controller.abort(new Error('client went away'))
      sawAbort = signal.aborted
    })
  const report = await router.dispatch([ev('delivered', 1), ev('delivered', 2)], { signal: controller.signal })
  t.equal(ran.length, 1)
  t.ok(sawAbort, 'the running handler sees context.signal aborted')
  t.same(report.outcomes.map((o) => o.status), ['handled', 'failed'])
  const second = report.outcomes[1]!
  t.match(second.status === 'failed' && second.error, { message: 'client went away' })

  const early = await router.dispatch([ev('delivered', 3)], { signal: AbortSignal.abort(new Error('already')) })
  t.equal(ran.length, 1, 'an already aborted dispatch runs nothing')
  t.equal(early.failed, 1)
})

t.test('identical events inside one dispatch are handled once; the copy is skipped', async (t) => {
  let n = 0
  const router = new WebhookEventRouter().on('open', () => { n++ })
  const report = await router.dispatch([ev('open', 1), ev('open', 2), ev('open', 1)])
  t.equal(n, 2)
  t.same(report.outcomes.map((o) => o.status), ['handled', 'handled', 'skipped'])
  t.ok(report.ok)

  const failing = new WebhookEventRouter({ concurrency: 2 }).on('open', () => { n++; throw new Error('no') })
  const bad = await failing.dispatch([ev('open', 1), ev('open', 1)])
  t.same(bad.outcomes.map((o) => o.status), ['failed', 'failed'], 'a copy of a failed event fails too (the delivery must be retried)')
})

t.test('on() checks its arguments', async (t) => {
  const router = new WebhookEventRouter()
  const on = router.on.bind(router) as (type: unknown, handler: unknown) => unknown
  t.throws(() => on('bounced', () => {}), { name: 'TypeError', message: /unknown event type "bounced".*'hard-bounced'/ })
  t.throws(() => on(['open', 'clik'], () => {}), { name: 'TypeError', message: /"clik"/ })
  t.throws(() => on([], () => {}), { name: 'TypeError', message: /at least one event type/ })
  t.throws(() => on(['*'], () => {}), { name: 'TypeError', message: /'\*' alone/ })
  t.throws(() => on(42, () => {}), { name: 'TypeError', message: /event type name/ })
  t.throws(() => on('open', 'handler'), { name: 'TypeError', message: /handler function, got "handler"/ })
  t.throws(() => on('open', undefined), { name: 'TypeError', message: /handler function/ })
  // Nothing was registered by the failed calls.
  t.equal((await router.dispatch([ev('open', 1)])).unhandled, 1)
})

t.test('options are checked at construction, naming the option', async (t) => {
  const make = (o: unknown): unknown => new WebhookEventRouter(o as object)
  t.throws(() => make(null), { name: 'TypeError', message: /options must be an object/ })
  for (const concurrency of [0, -1, 1.5, '2', Number.NaN, Infinity]) {
    t.throws(() => make({ concurrency }), { name: 'TypeError', message: /^concurrency must be a positive integer/ }, `concurrency ${String(concurrency)}`)
  }
  for (const claimLifetime of [0, 0.5, '30', -3]) {
    t.throws(() => make({ claimLifetime }), { name: 'TypeError', message: /^claimLifetime must be a positive integer number of seconds/ })
  }
  t.throws(() => make({ seenEvents: {} }), { name: 'TypeError', message: /seenEvents must be a ClaimStore.*missing: claim, complete, release, extend/ })
  // A v1 custom store (has/add/delete only) is told what it lacks.
  t.throws(() => make({ seenEvents: { has: async () => [], add: async () => [], delete: async () => {} } }), { message: /missing: claim, complete, release, extend/ })
  t.throws(() => make({ seenEvents: 'redis://' }), { message: /seenEvents must be a ClaimStore/ })
  const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore(), concurrency: 4, claimLifetime: 10 })
  t.equal(router.claimLifetime, 10)
  t.equal(new WebhookEventRouter().claimLifetime, 30, 'claimLifetime defaults to 30 s')
})

t.test('dispatch() checks its arguments synchronously', async (t) => {
  const router = new WebhookEventRouter().on('*', () => {})
  const dispatch = router.dispatch.bind(router) as (events: unknown, context?: unknown) => unknown
  t.throws(() => dispatch(undefined), { name: 'TypeError', message: /array of events/ })
  t.throws(() => dispatch([], 'ctx'), { name: 'TypeError', message: /context must be an object/ })
  t.throws(() => dispatch([], { signal: {} }), { name: 'TypeError', message: /signal must be an AbortSignal/ })
  t.throws(() => dispatch([], { log: {} }), { name: 'TypeError', message: /log must be a logger/ })
})

t.test('handlers registered later apply to later dispatches only', async (t) => {
  const router = new WebhookEventRouter()
  const events: WebhookEvent[] = [ev('complained', 1)]
  t.equal((await router.dispatch(events)).unhandled, 1)
  router.on('complained', () => {})
  t.equal((await router.dispatch(events)).handled, 1)
})
