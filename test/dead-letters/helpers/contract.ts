// The dead-letter store contract, run against every backend (memory, Redis, a Redis Cluster,
// PostgreSQL, a SQLite file): counting, parking, listing (paged, by type and age), show, discard,
// retry holds, and the error kept bounded and free of credentials.
import type { Test } from 'tap'
import { deadLetterError, eventFingerprint, type DeadLetterStore, type WebhookEvent } from '../../../src/index.js'
import { ev } from '../../dispatch/helpers/events.js'

export function failure (event: WebhookEvent, parkAfter: number, error: unknown = new Error('boom')): Parameters<DeadLetterStore['recordFailure']>[0] {
  return { event, fingerprint: eventFingerprint(event), error: deadLetterError(error), parkAfter }
}

export async function behavesAsADeadLetterStore (t: Test, make: () => Promise<DeadLetterStore>): Promise<void> {
  t.test('counts attempts, parks after N, keeps the event and its last error', async (t) => {
    const store = await make()
    const event = ev('hard-bounced', 1, { status: '5.1.1' })
    const fp = eventFingerprint(event)
    t.same(await store.recordFailure(failure(event, 3, new TypeError('first'))), { attempts: 1, parked: false })
    t.same(await store.recordFailure(failure(event, 3, new RangeError('second'))), { attempts: 2, parked: false })
    t.equal(await store.get(fp), undefined, 'not a dead letter before the threshold')
    t.same((await store.list()).items, [])
    t.same(await store.recordFailure(failure(event, 3, new Error('third'))), { attempts: 3, parked: true })
    const letter = await store.get(fp)
    t.ok(letter)
    t.equal(letter!.fingerprint, fp)
    t.equal(letter!.type, 'hard-bounced')
    t.same(letter!.event, JSON.parse(JSON.stringify(event)))
    t.equal(eventFingerprint(letter!.event), fp, 'the stored event is the event')
    t.equal(letter!.attempts, 3)
    t.same(letter!.error, { name: 'Error', message: 'third' })
    t.ok(letter!.firstFailedAt.getTime() <= letter!.lastFailedAt.getTime())
    t.ok(letter!.parkedAt instanceof Date)
    t.equal(letter!.source, 'router')
    // A failure after parking (a retry found it not done) counts and keeps the newest error, still parked.
    t.same(await store.recordFailure(failure(event, 3, new Error('fourth'))), { attempts: 4, parked: true })
    t.equal((await store.get(fp))!.error.message, 'fourth')
  })

  t.test('clearFailures forgets failing events, never dead letters', async (t) => {
    const store = await make()
    const a = ev('open', 10)
    const b = ev('open', 11)
    await store.recordFailure(failure(a, 2))
    await store.recordFailure(failure(b, 1))
    await store.clearFailures([eventFingerprint(a), eventFingerprint(b)])
    t.same(await store.recordFailure(failure(a, 2)), { attempts: 1, parked: false }, 'counting starts again')
    t.ok(await store.get(eventFingerprint(b)), 'the dead letter stays')
  })

  t.test('the error is bounded and loses credentials', async (t) => {
    const store = await make()
    const event = ev('click', 20)
    const long = 'x'.repeat(5000)
    const err = new Error(`connect postgres://app:hunter2@db.internal/prod failed; Authorization: Bearer abc.def.ghi; api_key=sk_live_123 ${long}`)
    ;(err as any).headers = { authorization: 'Bearer leaked' }
    await store.recordFailure(failure(event, 1, err))
    const letter = (await store.get(eventFingerprint(event)))!
    t.ok(letter.error.message.length <= 1000)
    t.notMatch(letter.error.message, /hunter2|abc\.def\.ghi|sk_live_123|leaked/)
    t.match(letter.error.message, /postgres:\/\/\[redacted\]@db\.internal/)
    t.notMatch(JSON.stringify(letter), /leaked/, 'no own property of the error is kept')
  })

  t.test('list: newest first, paged, filtered by type and age', async (t) => {
    const store = await make()
    const events = Array.from({ length: 7 }, (_v, i) => ev(i % 2 === 0 ? 'soft-bounced' : 'dropped', 100 + i))
    const times: number[] = []
    for (const e of events) {
      await store.recordFailure(failure(e, 1))
      times.push(Date.now())
      // Distinct parking times, so "before" and "after" cut between them.
      const t0 = Date.now()
      while (Date.now() === t0) await new Promise((resolve) => setImmediate(resolve))
    }
    const all = []
    let cursor: string | undefined
    let pages = 0
    do {
      const page = await store.list({ limit: 3, ...(cursor !== undefined ? { cursor } : {}) })
      t.ok(page.items.length <= 3)
      all.push(...page.items)
      cursor = page.next
      pages++
    } while (cursor !== undefined)
    t.equal(pages, 3)
    t.same(all.map((l) => l.fingerprint), events.map(eventFingerprint).reverse(), 'every dead letter once, newest first')
    const soft = await store.list({ type: 'soft-bounced' })
    t.same(soft.items.map((l) => l.type), ['soft-bounced', 'soft-bounced', 'soft-bounced', 'soft-bounced'])
    const older = await store.list({ parkedBefore: new Date(times[2]! + 1) })
    t.same(older.items.map((l) => l.fingerprint), events.slice(0, 3).map(eventFingerprint).reverse())
    const newer = await store.list({ parkedAfter: new Date(times[4]! + 1), type: 'dropped' })
    t.same(newer.items.map((l) => l.fingerprint), [eventFingerprint(events[5]!)])
    await t.rejects(store.list({ limit: 0 }), TypeError)
    await t.rejects(store.list({ cursor: 'not a cursor!' }), TypeError)
  })

  t.test('discard and requestRetry', async (t) => {
    const store = await make()
    const event = ev('complained', 30)
    const fp = eventFingerprint(event)
    t.equal(await store.discard(fp), false)
    t.equal(await store.requestRetry(fp), false)
    await store.recordFailure(failure(event, 1))
    t.equal(await store.requestRetry(fp), true)
    t.ok((await store.get(fp))!.retryRequestedAt instanceof Date)
    t.same((await store.list({ retryRequested: true })).items.map((l) => l.fingerprint), [fp])
    t.equal(await store.discard(fp), true)
    t.equal(await store.get(fp), undefined)
    t.equal(await store.discard(fp), false)
  })

  t.test('retry holds: one holder at a time; resolve removes, fail parks again with the new error', async (t) => {
    const store = await make()
    const event = ev('delivered', 40)
    const fp = eventFingerprint(event)
    t.equal(await store.claimRetry(fp, 30), 'missing')
    await store.recordFailure(failure(event, 1, new Error('old')))
    await store.requestRetry(fp)
    const [a, b] = await Promise.all([store.claimRetry(fp, 30), store.claimRetry(fp, 30)])
    const held = [a, b].filter((r) => typeof r === 'object')
    t.equal(held.length, 1, 'one of two concurrent retries holds it')
    t.ok([a, b].includes('busy'))
    const retry = held[0] as Exclude<typeof a, string>
    t.equal(retry.letter.fingerprint, fp)
    await store.failRetry(retry, { name: 'Error', message: 'new' })
    const again = (await store.get(fp))!
    t.equal(again.attempts, 2)
    t.equal(again.error.message, 'new')
    t.equal(again.retryRequestedAt, undefined, 'the request is used up')
    // A stale hold changes nothing.
    await store.resolveRetry(retry)
    t.ok(await store.get(fp), 'a resolve with a hold that was given up deletes nothing')
    const second = await store.claimRetry(fp, 30)
    t.type(second, 'object')
    await store.resolveRetry(second as Exclude<typeof second, string>)
    t.equal(await store.get(fp), undefined, 'resolved: gone')
  })

  t.test('an expired retry hold can be taken again', async (t) => {
    const store = await make()
    const event = ev('processed', 50)
    const fp = eventFingerprint(event)
    await store.recordFailure(failure(event, 1))
    t.type(await store.claimRetry(fp, 1), 'object')
    t.equal(await store.claimRetry(fp, 1), 'busy')
    const until = Date.now() + 1100
    while (Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 50))
    t.type(await store.claimRetry(fp, 1), 'object', 'a crashed retry holds it for its lifetime only')
  })

  t.test('bad input is a TypeError', async (t) => {
    const store = await make()
    await t.rejects(store.get('../../etc'), TypeError)
    await t.rejects(store.discard(''), TypeError)
  })
}
