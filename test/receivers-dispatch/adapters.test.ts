// Every adapter with `handlers` (a WebhookEventRouter) and with `enqueue` answers the delivery
// itself, with the same statuses and bodies: 200 with counts, 500 when a handler failed, 503 with
// Retry-After when another delivery holds an event or a store or the queue failed; the replay
// claim is settled by that answer (a 5xx lets MailChannels' retry in), nothing after the receiver
// runs, and nothing throws or rejects unhandled.
import t from 'tap'
import { MemoryClaimStore, WebhookEventRouter, type ClaimStore } from '../../src/index.js'
import type { EnqueueContext, EventHandlerContext, WebhookEvent } from '../../src/fastify/index.js'
import { ADAPTERS, endpoint, sign, trackUnhandledRejections, wireEvents, type AdapterName } from './helpers/adapters.js'

const unhandled = trackUnhandledRejections(t)

/** Resolves when `open()` is called: holds a handler in flight. */
function gate (): { wait: Promise<void>, open: () => void } {
  let open!: () => void
  const wait = new Promise<void>((resolve) => { open = resolve })
  return { wait, open }
}

/** A seen-events store that cannot be reached until `up` is set (Redis down). */
function downStore (): ClaimStore & { up: boolean } {
  const memory = new MemoryClaimStore()
  const down = async (): Promise<never> => { throw new Error('connect ECONNREFUSED 127.0.0.1:6379') }
  const store = {
    up: false,
    has: async (fps: readonly string[]) => store.up ? await memory.has(fps) : await down(),
    add: async (fps: readonly string[]) => store.up ? await memory.add(fps) : await down(),
    delete: async (fps: readonly string[]) => store.up ? await memory.delete(fps) : await down(),
    claim: async (fps: readonly string[], lifetime: number) => store.up ? await memory.claim(fps, lifetime) : await down(),
    complete: async (claims: Parameters<ClaimStore['complete']>[0]) => store.up ? await memory.complete(claims) : await down(),
    release: async (claims: Parameters<ClaimStore['release']>[0]) => store.up ? await memory.release(claims) : await down(),
    extend: async (claims: Parameters<ClaimStore['extend']>[0], lifetime: number) => store.up ? await memory.extend(claims, lifetime) : await down(),
  }
  return store
}

function cases (adapter: AdapterName): void {
  t.test(`${adapter}: handlers answer 200 with the counts; a re-signed resend is skipped, an exact one is a duplicate`, async (t) => {
    const effects: string[] = []
    const keyIds: string[] = []
    const router = new WebhookEventRouter<EventHandlerContext>({ seenEvents: new MemoryClaimStore() })
      .on(['delivered', 'open'], (_event, { fingerprint, keyId }) => { effects.push(fingerprint); keyIds.push(keyId) })
    const ep = await endpoint(t, adapter, { handlers: router })
    const events = wireEvents(['delivered', 'open', 'dropped'])
    const d = sign(events)
    t.same(await ep.post(d), { status: 200, body: { handled: 2, skipped: 0, unhandled: 1 }, retryAfter: null })
    t.same(await ep.post(d), { status: 200, body: { duplicate: true }, retryAfter: null }, 'an exact resend is a duplicate delivery')
    t.same(await ep.post(sign(events, 5)), { status: 200, body: { handled: 0, skipped: 2, unhandled: 1 }, retryAfter: null },
      'a re-signed resend passes the replay store; its events are skipped')
    t.equal(effects.length, 2, 'each handled event ran once')
    t.same(keyIds, ['mckey', 'mckey'], 'handlers see the key id the delivery was verified with')
    t.equal(ep.after(), 0, 'nothing after the receiver ran')
  })

  t.test(`${adapter}: a failing handler answers 500 handler_error; the retry runs only the events left`, async (t) => {
    const effects = new Map<string, number>()
    let failures = 1
    const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore() })
      .on('*', (event, { fingerprint }) => {
        if (event.event === 'open' && failures > 0) {
          failures--
          throw new Error('crm unreachable: connection reset')
        }
        effects.set(fingerprint, (effects.get(fingerprint) ?? 0) + 1)
      })
    const ep = await endpoint(t, adapter, { handlers: router })
    const d = sign(wireEvents(['delivered', 'open', 'click']))
    const failed = await ep.post(d)
    t.equal(failed.status, 500)
    t.equal(failed.body.code, 'handler_error')
    t.notMatch(JSON.stringify(failed.body), /crm unreachable/, 'the handler error is not in the answer')
    t.equal(failed.retryAfter, null)
    t.match(ep.logs(), /crm unreachable: connection reset/, 'the error message is logged')
    t.notMatch(ep.logs(), /person\d@example\.net/, 'no body content in the logs')
    t.notMatch(ep.logs(), d.headers.signature.slice(12, 40), 'no signature in the logs')
    t.same(await ep.post(d), { status: 200, body: { handled: 1, skipped: 2, unhandled: 0 }, retryAfter: null },
      'the identical retry is handled (the 500 released the delivery claim) and runs only the failed event')
    t.same([...effects.values()], [1, 1, 1], 'every event took effect exactly once')
    t.equal(ep.after(), 0)
  })

  t.test(`${adapter}: an event held by another delivery answers 503 event_in_progress with Retry-After = claimLifetime`, async (t) => {
    const hold = gate()
    let started = 0
    let runs = 0
    const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore(), claimLifetime: 7 })
      .on('delivered', async () => { runs++; if (++started === 1) await hold.wait })
    const ep = await endpoint(t, adapter, { handlers: router })
    const events = wireEvents(['delivered'])
    const first = ep.post(sign(events))
    while (started === 0) await new Promise((resolve) => setTimeout(resolve, 5))
    const resend = sign(events, 3)
    const deferred = await ep.post(resend)
    t.equal(deferred.status, 503)
    t.equal(deferred.body.code, 'event_in_progress')
    t.equal(deferred.retryAfter, '7')
    hold.open()
    t.same(await first, { status: 200, body: { handled: 1, skipped: 0, unhandled: 0 }, retryAfter: null })
    t.same(await ep.post(resend), { status: 200, body: { handled: 0, skipped: 1, unhandled: 0 }, retryAfter: null },
      'the retry of the deferred delivery is accepted (its claim was released) and skips the event')
    t.equal(runs, 1)
  })

  t.test(`${adapter}: a seen-events store that cannot answer gives 503 replay_store_unavailable, no handler runs`, async (t) => {
    const store = downStore()
    let runs = 0
    const router = new WebhookEventRouter({ seenEvents: store }).on('*', () => { runs++ })
    const ep = await endpoint(t, adapter, { handlers: router })
    const d = sign(wireEvents(['delivered', 'open']))
    const down = await ep.post(d)
    t.equal(down.status, 503)
    t.equal(down.body.code, 'replay_store_unavailable')
    t.equal(down.retryAfter, '10')
    t.equal(runs, 0)
    store.up = true
    t.same(await ep.post(d), { status: 200, body: { handled: 2, skipped: 0, unhandled: 0 }, retryAfter: null }, 'the retry is handled once the store is back')
  })

  t.test(`${adapter}: handlers that reject (not a router) answer 500, and the retry is accepted`, async (t) => {
    let calls = 0
    const handlers = { dispatch: async () => { calls++; throw new Error('not a router') } }
    const ep = await endpoint(t, adapter, { handlers: handlers as never })
    const d = sign(wireEvents(['delivered']))
    t.equal((await ep.post(d)).status, 500)
    t.equal((await ep.post(d)).status, 500, 'the claim was released: the retry dispatches again')
    t.equal(calls, 2)
  })

  t.test(`${adapter}: enqueue answers 200 { queued } once the queue accepted the events; 503 queue_unavailable when it did not`, async (t) => {
    const queued: Array<{ events: readonly WebhookEvent[], context: EnqueueContext }> = []
    let failures = 1
    const ep = await endpoint(t, adapter, {
      enqueue: async (events, context) => {
        if (failures > 0) {
          failures--
          throw new Error('queue: connect ECONNREFUSED')
        }
        queued.push({ events, context })
      },
    })
    const d = sign(wireEvents(['delivered', 'hard-bounced']))
    const down = await ep.post(d)
    t.equal(down.status, 503)
    t.equal(down.body.code, 'queue_unavailable')
    t.equal(down.retryAfter, '10')
    t.equal(queued.length, 0, 'nothing handed on')
    t.match(ep.logs(), /queue: connect ECONNREFUSED/, 'the error message is logged')
    t.same(await ep.post(d), { status: 200, body: { queued: 2 }, retryAfter: null }, 'the retry is accepted')
    t.equal(queued.length, 1)
    t.same(queued[0]!.events.map((e) => e.event), ['delivered', 'hard-bounced'], 'the verified, typed events')
    t.equal(queued[0]!.context.keyId, 'mckey')
    t.type(queued[0]!.context.log.info, 'function')
    t.same((await ep.post(d)).body, { duplicate: true }, 'an exact resend is not queued again')
    t.equal(queued.length, 1)
    t.equal(ep.after(), 0, 'nothing after the receiver ran')
  })

  t.test(`${adapter}: enqueue that throws synchronously, never settles, or rejects after its timeout answers 503`, async (t) => {
    const sync = await endpoint(t, adapter, { enqueue: () => { throw new Error('sync failure') } })
    const a = await sync.post(sign(wireEvents(['delivered'])))
    t.same([a.status, a.body.code, a.retryAfter], [503, 'queue_unavailable', '10'])

    const hung = await endpoint(t, adapter, { enqueue: async () => await new Promise<void>(() => {}), enqueueTimeout: 50 })
    const b = await hung.post(sign(wireEvents(['delivered'])))
    t.same([b.status, b.body.code], [503, 'queue_unavailable'], 'a queue that never answers times out')

    let late = 0
    const slow = await endpoint(t, adapter, {
      enqueueTimeout: 20,
      enqueue: async () => { await new Promise((resolve) => setTimeout(resolve, 80)); late++; throw new Error('late failure') },
    })
    const c = await slow.post(sign(wireEvents(['delivered'])))
    t.equal(c.status, 503)
    while (late === 0) await new Promise((resolve) => setTimeout(resolve, 10))
    await new Promise((resolve) => setTimeout(resolve, 10))
  })
}

for (const adapter of ADAPTERS) cases(adapter)

t.test('no unhandled rejection', async (t) => {
  t.same(unhandled(), [])
})
