import type { Test } from 'tap'
import { WebhookEventRouter, eventFingerprint, type DispatchReport, type ClaimStore, type WebhookEvent } from '../../../src/index.js'
import { Effects, ev, sleep } from './events.js'

/** Routers as separate instances would run them: each with its own store object (own client). */
export interface Instances {
  stores: ClaimStore[]
}

function routerFor (store: ClaimStore, effects: Effects, failOnce: Set<string>): WebhookEventRouter {
  return new WebhookEventRouter({ seenEvents: store, concurrency: 4 })
    .on('*', async (event, { fingerprint }) => {
      // A little real asynchrony, so concurrent dispatches interleave.
      await sleep(Math.floor(Math.random() * 4))
      if (failOnce.delete(fingerprint)) throw new Error('injected handler failure')
      effects.record(fingerprint)
    })
}

/**
 * Many concurrent identical deliveries and resends (shuffled copies) of the same events across
 * instances, some handlers failing once: retried like MailChannels retries a 5xx, until every
 * delivery is answered 2xx. Every event's effect must happen exactly once.
 */
export async function concurrentDeliveries (t: Test, instances: Instances, options: { events: number, deliveries: number, rounds: number, failures: number }): Promise<void> {
  const effects = new Effects()
  const events: WebhookEvent[] = Array.from({ length: options.events }, (_, i) => ev(i % 2 === 0 ? 'delivered' : 'open', i, { recipients: [`r${i}@example.com`] }))
  const fps = events.map(eventFingerprint)
  const failOnce = new Set(fps.filter((_, i) => i % Math.max(1, Math.floor(options.events / options.failures)) === 0).slice(0, options.failures))
  const injected = failOnce.size
  const routers = instances.stores.map((s) => routerFor(s, effects, failOnce))

  const deliver = async (d: number): Promise<{ attempts: number, statuses: Set<string> }> => {
    // A resend is re-signed and may reorder nothing, but a new copy of each event object.
    const copy = events.map((e) => structuredClone(e))
    if (d % 3 === 1) copy.reverse()
    const statuses = new Set<string>()
    for (let attempt = 1; attempt <= options.rounds; attempt++) {
      const report: DispatchReport = await routers[d % routers.length]!.dispatch(copy)
      for (const o of report.outcomes) statuses.add(o.status)
      if (report.ok) return { attempts: attempt, statuses }
      await sleep(5 + Math.floor(Math.random() * 10))
    }
    throw new Error(`delivery ${d} was not acknowledged after ${options.rounds} attempts`)
  }

  const results = await Promise.all(Array.from({ length: options.deliveries }, async (_, d) => await deliver(d)))
  t.same(effects.repeated(), [], 'no event handled twice')
  t.equal(fps.filter((fp) => effects.get(fp) === 1).length, fps.length, 'every event handled exactly once')
  t.equal(failOnce.size, 0, `all ${injected} injected failures happened`)
  const seen = new Set(results.flatMap((r) => [...r.statuses]))
  t.ok(seen.has('skipped'), 'some deliveries found events already handled')
  t.ok(results.some((r) => r.attempts > 1), 'some deliveries needed a retry')

  // A late resend, after everything settled: nothing runs again.
  const late = await routers[0]!.dispatch(events.map((e) => structuredClone(e)))
  t.equal(late.skipped, events.length, 'a later resend skips every event')
  t.same(effects.repeated(), [])
}

/**
 * A retry after failures completes only the events that failed: handled ones are skipped, and
 * no handler effect happens twice.
 */
export async function retryCompletesTheRest (t: Test, first: ClaimStore, second: ClaimStore): Promise<void> {
  const effects = new Effects()
  const events = Array.from({ length: 10 }, (_, i) => ev('soft-bounced', 100 + i, { status: '4.2.2' }))
  const fps = events.map(eventFingerprint)
  const failing = new Set([fps[2]!, fps[5]!, fps[9]!])
  const handler = async (_e: WebhookEvent, { fingerprint }: { fingerprint: string }): Promise<void> => {
    if (failing.has(fingerprint)) throw new Error('downstream unavailable')
    effects.record(fingerprint)
  }
  const a = new WebhookEventRouter({ seenEvents: first }).on('soft-bounced', handler)
  const b = new WebhookEventRouter({ seenEvents: second }).on('soft-bounced', handler)

  const r1 = await a.dispatch(events)
  t.same(r1.outcomes.map((o) => o.status), events.map((_, i) => [2, 5, 9].includes(i) ? 'failed' : 'handled'))
  t.notOk(r1.ok)
  failing.clear()
  // MailChannels retries the delivery; another instance gets it.
  const r2 = await b.dispatch(events)
  t.same(r2.outcomes.map((o) => o.status), events.map((_, i) => [2, 5, 9].includes(i) ? 'handled' : 'skipped'), 'the retry handles only the failed events')
  t.ok(r2.ok)
  t.same(effects.repeated(), [])
  t.equal(effects.counts.size, 10)
}
