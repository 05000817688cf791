// A delivery answered by `handlers` or `enqueue` is published on the delivery channel with the
// code it was answered with, and its handler time covers the dispatch (or the hand-off).
import diagnosticsChannel from 'node:diagnostics_channel'
import t from 'tap'
import { DELIVERY_DIAGNOSTICS_CHANNEL, MemoryClaimStore, WebhookEventRouter, type WebhookDeliveryMessage } from '../../src/index.js'
import { ADAPTERS, endpoint, sign, wireEvents } from './helpers/adapters.js'

const messages: WebhookDeliveryMessage[] = []
const onMessage = (m: unknown): void => { messages.push(m as WebhookDeliveryMessage) }
diagnosticsChannel.subscribe(DELIVERY_DIAGNOSTICS_CHANNEL, onMessage)
t.teardown(() => { diagnosticsChannel.unsubscribe(DELIVERY_DIAGNOSTICS_CHANNEL, onMessage) })

/** The message of the next delivery posted by `post`. */
async function messageOf (post: () => Promise<unknown>): Promise<Pick<WebhookDeliveryMessage, 'outcome' | 'type' | 'status' | 'eventCount'> & { handlerDurationMs: number }> {
  const before = messages.length
  await post()
  // Published when the claim is settled, before or right after the answer is written.
  for (let i = 0; i < 100 && messages.length === before; i++) await new Promise((resolve) => setTimeout(resolve, 5))
  const m = messages[before]!
  return { outcome: m.outcome, type: m.type, status: m.status, eventCount: m.eventCount, handlerDurationMs: m.handlerDurationMs }
}

for (const adapter of ADAPTERS) {
  t.test(`${adapter}: each answer of handlers and enqueue is one delivery message with its code`, async (t) => {
    let fail = false
    let hold: Promise<void> | undefined
    const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore(), claimLifetime: 5 })
      .on('*', async () => {
        await new Promise((resolve) => setTimeout(resolve, 25))
        if (hold !== undefined) await hold
        if (fail) throw new Error('handler failed')
      })
    const handlers = await endpoint(t, adapter, { handlers: router })

    const ok = await messageOf(() => handlers.post(sign(wireEvents(['delivered', 'open']))))
    t.match(ok, { outcome: 'accepted', type: null, status: 200, eventCount: 2 })
    t.ok(ok.handlerDurationMs >= 20, 'the handler time covers the dispatch')

    fail = true
    t.match(await messageOf(() => handlers.post(sign(wireEvents(['delivered'])))), { outcome: 'failed', type: 'handler_error', status: 500 })
    fail = false

    let release!: () => void
    hold = new Promise((resolve) => { release = resolve })
    const events = wireEvents(['click'])
    const first = handlers.post(sign(events))
    await new Promise((resolve) => setTimeout(resolve, 40))
    const before = messages.length
    const deferred = await handlers.post(sign(events, 2))
    t.equal(deferred.status, 503)
    t.match(messages.slice(before), [{ outcome: 'failed', type: 'event_in_progress', status: 503 }])
    release()
    hold = undefined
    await first

    let up = false
    const queue = await endpoint(t, adapter, { enqueue: async () => { if (!up) throw new Error('queue down') } })
    t.match(await messageOf(() => queue.post(sign(wireEvents(['delivered'])))), { outcome: 'failed', type: 'queue_unavailable', status: 503 })
    up = true
    t.match(await messageOf(() => queue.post(sign(wireEvents(['delivered'])))), { outcome: 'accepted', type: null, status: 200, eventCount: 1 })
  })
}
