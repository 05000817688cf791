// The router's dead letters: a poison event is counted, parked after `after` failed attempts and
// completed, so its delivery is answered 2xx; retry runs it again under an ordinary claim (once,
// however many retry at the same time), discard deletes it; the signals are published.
import diagnosticsChannel from 'node:diagnostics_channel'
import t, { type Test } from 'tap'
import {
  MemoryDeadLetterStore, MemoryClaimStore, RedisDeadLetterStore, RedisClaimStore, WebhookEventRouter,
  eventFingerprint, type DeadLetterStore, type ClaimStore,
} from '../../src/index.js'
import { DEAD_LETTER_DIAGNOSTICS_CHANNEL, type DeadLetterMessage } from '../../src/diagnostics/dead-letter-types.js'
import { ev } from '../dispatch/helpers/events.js'
import { endpoint, sign, wireEvents } from '../receivers-dispatch/helpers/adapters.js'
import { startRedisServer } from '../replay/helpers/redis-server.js'

// Semantics, not failure handling: generous timeouts, so a loaded machine cannot fail a call.
const GENEROUS = { commandTimeout: 5000, maxRetriesPerRequest: 1 }

const messages: DeadLetterMessage[] = []
const listen = (m: unknown): void => { messages.push(m as DeadLetterMessage) }
diagnosticsChannel.subscribe(DEAD_LETTER_DIAGNOSTICS_CHANNEL, listen)
t.teardown(() => { diagnosticsChannel.unsubscribe(DEAD_LETTER_DIAGNOSTICS_CHANNEL, listen) })

t.test('deadLetters is checked at construction', async (t) => {
  t.throws(() => new WebhookEventRouter({ deadLetters: {} as never }), /deadLetters.store must be a DeadLetterStore/)
  t.throws(() => new WebhookEventRouter({ deadLetters: { store: new MemoryDeadLetterStore(), after: 0 } }), /deadLetters.after must be a whole number/)
  t.throws(() => new WebhookEventRouter({ deadLetters: { store: new MemoryDeadLetterStore(), retryLifetime: -1 } }), /retryLifetime/)
  await t.rejects(new WebhookEventRouter().retryDeadLetter('abc'), /needs the router's deadLetters option/)
})

async function parkRetryDiscard (t: Test, seenEvents: () => ClaimStore, deadLetters: () => DeadLetterStore): Promise<void> {
  t.test('parked after `after` failures, completed, reported parked; later deliveries skip it', async (t) => {
    let broken = true
    let calls = 0
    const store = deadLetters()
    const router = new WebhookEventRouter({ seenEvents: seenEvents(), deadLetters: { store, after: 3 } })
      .on('hard-bounced', () => { calls++; if (broken) throw new TypeError('no such column: reason') })
    const poison = ev('hard-bounced', 1)
    const fp = eventFingerprint(poison)
    messages.length = 0
    for (let attempt = 1; attempt <= 2; attempt++) {
      const report = await router.dispatch([poison])
      t.equal(report.failed, 1, `attempt ${attempt} fails the delivery`)
      t.equal(report.ok, false)
    }
    const third = await router.dispatch([poison])
    t.equal(third.parked, 1)
    t.equal(third.ok, true, 'the delivery may be acknowledged')
    t.equal(third.outcomes[0]!.status, 'parked')
    t.match((third.outcomes[0] as { error: Error }).error.message, 'no such column')
    t.same(messages.map((m) => [m.action, m.type, m.attempts, m.source]), [['parked', 'hard-bounced', 3, 'router']])
    const fourth = await router.dispatch([poison])
    t.equal(fourth.skipped, 1, 'a parked event is done: a resend skips it')
    t.equal(calls, 3)
    const letter = await router.deadLetters!.get(fp)
    t.equal(letter?.attempts, 3)
    t.same(letter?.error, { name: 'TypeError', message: 'no such column: reason' })

    // Retry while still broken: parked again with the new error, still done.
    const failed = await router.retryDeadLetter(fp)
    t.equal(failed.status, 'failed')
    t.equal((await router.deadLetters!.get(fp))?.attempts, 4)
    t.equal((await router.dispatch([poison])).skipped, 1, 'parked again: done again')
    // Fixed: the retry handles it and removes the dead letter.
    broken = false
    messages.length = 0
    t.same(await router.retryDeadLetter(fp), { status: 'handled', fingerprint: fp })
    t.equal(await router.deadLetters!.get(fp), undefined)
    t.same(messages.map((m) => m.action), ['retried'])
    t.equal((await router.dispatch([poison])).skipped, 1, 'handled: a resend still skips it')
    t.same(await router.retryDeadLetter(fp), { status: 'missing', fingerprint: fp })
    t.equal(calls, 5, 'two retries ran the handler twice; nothing else did')
  })

  t.test('two retries of one dead letter at once run its handlers once', async (t) => {
    const store = deadLetters()
    let runs = 0
    let broken = true
    let open!: () => void
    const gate = new Promise<void>((resolve) => { open = resolve })
    const router = new WebhookEventRouter({ seenEvents: seenEvents(), deadLetters: { store, after: 1 } })
      .on('dropped', async () => {
        runs++
        if (broken) throw new Error('down')
        await gate
      })
    const event = ev('dropped', 2)
    t.equal((await router.dispatch([event])).parked, 1)
    broken = false
    const retries = [router.retryDeadLetter(eventFingerprint(event)), router.retryDeadLetter(eventFingerprint(event))]
    // One holds the dead letter, its handler waiting at the gate: the other is told busy meanwhile.
    t.equal((await Promise.race(retries)).status, 'busy')
    open()
    const results = await Promise.all(retries)
    t.same(results.map((r) => r.status).sort(), ['busy', 'handled'])
    t.equal(runs, 2, 'the parking run and one retry')
  })

  t.test('discard deletes it and says so; requested retries run on retryRequestedDeadLetters', async (t) => {
    const store = deadLetters()
    const router = new WebhookEventRouter({ seenEvents: seenEvents(), deadLetters: { store, after: 1 } })
      .on('complained', () => { throw new Error('nope') })
    const a = ev('complained', 3)
    const b = ev('complained', 4)
    await router.dispatch([a, b])
    messages.length = 0
    t.equal(await router.discardDeadLetter(eventFingerprint(a)), true)
    t.equal(await router.discardDeadLetter(eventFingerprint(a)), false)
    t.same(messages.map((m) => m.action), ['discarded'])
    t.equal(await store.requestRetry(eventFingerprint(b)), true)
    const results = await router.retryRequestedDeadLetters()
    t.same(results.map((r) => r.status), ['failed'])
    t.same((await store.list({ retryRequested: true })).items, [], 'a request is used up by its retry')
  })

  t.test('a dead-letter store that fails leaves the event failing, as without dead letters', async (t) => {
    const store = deadLetters()
    const broken: DeadLetterStore = Object.assign(Object.create(store) as DeadLetterStore, {
      recordFailure: async () => { throw new Error('ECONNREFUSED') },
    })
    for (const m of ['clearFailures', 'list', 'get', 'discard', 'requestRetry', 'claimRetry', 'resolveRetry', 'failRetry'] as const) (broken as any)[m] = (store as any)[m].bind(store)
    const router = new WebhookEventRouter({ seenEvents: seenEvents(), deadLetters: { store: broken, after: 1 } })
      .on('open', () => { throw new Error('poison') })
    const report = await router.dispatch([ev('open', 5)])
    t.equal(report.failed, 1)
    t.equal(report.parked, 0)
  })
}

t.test('without a seen-events store: parked and reported ok, but nothing remembers it done', async (t) => {
  let runs = 0
  const store = new MemoryDeadLetterStore()
  const router = new WebhookEventRouter({ concurrency: 4, deadLetters: { store, after: 1 } })
    .on('click', () => { runs++; throw new Error('bad url') })
    .on('open', async () => { await new Promise((resolve) => setImmediate(resolve)) })
  const events = [ev('click', 7), ev('open', 8), ev('open', 9)]
  const first = await router.dispatch(events)
  t.same([first.parked, first.handled, first.ok], [1, 2, true])
  const again = await router.dispatch(events)
  t.same([again.parked, again.handled], [1, 2], 'at least once: a resend runs everything again')
  t.equal(runs, 2)
  t.equal((await store.get(eventFingerprint(events[0]!)))?.attempts, 2)
})

t.test('memory stores', async (t) => {
  await parkRetryDiscard(t, () => new MemoryClaimStore(), () => new MemoryDeadLetterStore())
})

t.test('Redis stores', async (t) => {
  const redis = await startRedisServer()
  t.teardown(async () => { await redis.close() })
  const client = await redis.client(GENEROUS)
  let n = 0
  await parkRetryDiscard(t, () => new RedisClaimStore(client, { prefix: `seen-${n}:`, timeout: 10_000 }), () => new RedisDeadLetterStore(client, { prefix: `{dl-${n++}}:`, timeout: 10_000 }))

  t.test('one poison event among 1,000: 999 handled once, the poison parked, the delivery 2xx after the threshold', async (t) => {
    const effects = new Map<string, number>()
    let poisonCalls = 0
    const deadLetters = new RedisDeadLetterStore(client, { prefix: '{poison}:', timeout: 10_000 })
    const router = new WebhookEventRouter({ seenEvents: new RedisClaimStore(client, { prefix: 'poison-seen:', timeout: 10_000 }), concurrency: 8, deadLetters: { store: deadLetters, after: 3 } })
      .on('*', async (event, { fingerprint }) => {
        if (event.requestId?.endsWith('-500') === true) { poisonCalls++; throw new RangeError('amount out of range') }
        effects.set(fingerprint, (effects.get(fingerprint) ?? 0) + 1)
      })
    const ep = await endpoint(t, 'fastify path', { handlers: router })
    const events = wireEvents(Array.from({ length: 1000 }, (_v, i) => ['delivered', 'open', 'click', 'hard-bounced'][i % 4]!))
    const first = await ep.post(sign(events, 0))
    t.equal(first.status, 500, 'attempt 1: the poison fails the delivery')
    const second = await ep.post(sign(events, 1))
    t.equal(second.status, 500, 'attempt 2: still')
    t.notMatch(JSON.stringify(second.body), /amount out of range/, 'the body never carries the error text')
    const third = await ep.post(sign(events, 2))
    t.same(third, { status: 200, body: { handled: 0, skipped: 999, unhandled: 0, parked: 1 }, retryAfter: null }, 'attempt 3 parks it: 2xx')
    const fourth = await ep.post(sign(events, 3))
    t.same(fourth.body, { handled: 0, skipped: 1000, unhandled: 0 }, 'MailChannels would stop here; a resend skips everything')
    t.equal(effects.size, 999)
    t.ok([...effects.values()].every((n) => n === 1), 'every other event handled exactly once')
    t.equal(poisonCalls, 3)
    const page = await deadLetters.list()
    t.equal(page.items.length, 1)
    t.equal(page.items[0]!.event.requestId, events[500]!.request_id)
    t.equal(page.items[0]!.attempts, 3)
    t.same(page.items[0]!.error, { name: 'RangeError', message: 'amount out of range' })
  })
})
