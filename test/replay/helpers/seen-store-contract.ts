// The behaviour every seen-events store shares (memory, Redis, PostgreSQL, SQLite): each store's
// test file runs it against a real instance of that store.
import { type Test } from 'tap'
import {
  eventFingerprint,
  type StoreClaim, type StoreClaimResult, type ClaimStore, type WebhookEvent,
} from '../../../src/index.js'
import { toEvent } from '../../../src/events/parse-events.js'

const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }
const isClaim = (r: StoreClaimResult | undefined): r is StoreClaim => typeof r === 'object'

// The store's own has/add over events' fingerprints: the read-only check and the atomic first-writer-wins.
const filterUnseen = async (events: readonly WebhookEvent[], store: ClaimStore): Promise<WebhookEvent[]> => {
  const seen = await store.has(events.map(eventFingerprint))
  return events.filter((_event, i) => seen[i] !== true)
}
const markSeen = async (events: readonly WebhookEvent[], store: ClaimStore): Promise<void> => { await store.add(events.map(eventFingerprint)) }
const claimUnseen = async (events: readonly WebhookEvent[], store: ClaimStore): Promise<WebhookEvent[]> => {
  const fresh = await store.add(events.map(eventFingerprint))
  return events.filter((_event, i) => fresh[i] === true)
}

const ev = (n: number): WebhookEvent => toEvent({ event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000000 + n, request_id: `req-${n}` }, 0)

export async function behavesAsASeenStore (t: Test, make: () => Promise<ClaimStore>): Promise<void> {
  t.test('has and add: a resend: handled events are skipped, new ones kept in order', async (t) => {
    const store = await make()
    const first = [ev(1), ev(2), ev(3)]
    t.same(await filterUnseen(first, store), first, 'nothing seen yet')
    await markSeen(first, store)
    // The service re-signs a resend: a new delivery, the same events (fresh objects), plus a new one.
    const resend = [ev(4), ev(2), ev(1), ev(5)]
    t.same(await filterUnseen(resend, store), [ev(4), ev(5)])
  })

  t.test('add: of concurrent resends each event is claimed once', async (t) => {
    const store = await make()
    const batch = [ev(10), ev(11), ev(12)]
    const results = await Promise.all(Array.from({ length: 20 }, async () => await claimUnseen(batch, store)))
    t.same(results.flat().map(eventFingerprint).sort(), batch.map(eventFingerprint).sort(), 'every event exactly once over all callers')
    t.same(await claimUnseen(batch, store), [])
    await store.delete([eventFingerprint(ev(11))])
    t.same(await claimUnseen(batch, store), [ev(11)], 'a deleted fingerprint (processing failed) is handled again')
  })

  t.test('claim, complete, release: the exactly-once life of an event', async (t) => {
    const store = await make()
    const [a, b, c] = await store.claim(['a', 'b', 'c'], 30)
    t.ok(isClaim(a) && a.fingerprint === 'a' && isClaim(b) && b.fingerprint === 'b' && isClaim(c), 'fresh fingerprints are ours')
    if (!isClaim(a) || !isClaim(b) || !isClaim(c)) return
    t.not(a.token, b.token, 'every claim has its own token')
    t.same(await store.claim(['a', 'b', 'c'], 30), ['processing', 'processing', 'processing'], 'a live claim is someone else\'s')
    t.same(await store.has(['a', 'b']), [false, false], 'a claim is not a done mark')
    t.same(await store.add(['a']), [false], 'add treats a live claim as taken')
    await store.complete([a])
    await store.release([b])
    t.same(await store.has(['a', 'b']), [true, false])
    const again = await store.claim(['a', 'b', 'c'], 30)
    t.equal(again[0], 'done', 'a completed event answers done')
    t.ok(isClaim(again[1]) && again[1].token !== b.token, 'a released event is claimed anew')
    t.equal(again[2], 'processing')
    t.same(await store.claim([], 30), [])
    await store.complete([])
    await store.release([])
    t.same(await store.extend([], 30) ?? [], [])
  })

  t.test('release and extend act on their own token only; complete marks done whatever held the key', async (t) => {
    const store = await make()
    const [mine] = await store.claim(['k'], 30)
    if (!isClaim(mine)) return t.fail('claimed')
    await store.release([{ fingerprint: 'k', token: 'someone-else' }])
    t.same(await store.claim(['k'], 30), ['processing'], 'a foreign token releases nothing')
    t.same(await store.extend([mine, { fingerprint: 'k', token: 'someone-else' }, { fingerprint: 'never-claimed', token: mine.token }], 30), [true, false, false],
      'extend answers, per claim, whether it was still held')
    const [other] = await store.claim(['k2'], 30)
    if (!isClaim(other)) return t.fail('claimed')
    await store.release([other])
    t.same(await store.extend([other], 30), [false], 'a released claim is not held')
    await store.complete([mine])
    t.same(await store.extend([mine], 30), [false], 'a completed claim is not held (and extend leaves the done mark)')
    t.same(await store.claim(['k'], 30), ['done'])
    await store.release([mine])
    t.same(await store.claim(['k'], 30), ['done'], 'release after complete leaves the done mark')
    await store.delete(['k'])
    t.ok(isClaim((await store.claim(['k'], 30))[0]), 'delete forgets done marks')
    await store.delete(['k'])
  })

  t.test('of 20 concurrent claimers each event is claimed once', async (t) => {
    const store = await make()
    const fps = ['p1', 'p2', 'p3', 'p4', 'p5']
    const results = await Promise.all(Array.from({ length: 20 }, async () => await store.claim(fps, 30)))
    const won = results.flat().filter(isClaim).map((c) => c.fingerprint).sort()
    t.same(won, fps, 'every fingerprint exactly once over all callers')
    t.ok(results.flat().every((r) => isClaim(r) || r === 'processing'), 'the others see processing')
  })

  t.test('an orphaned claim expires; extend keeps a live one', async (t) => {
    const store = await make()
    const [held, orphan] = await store.claim(['held', 'orphan'], 1)
    if (!isClaim(held) || !isClaim(orphan)) return t.fail('claimed')
    await sleep(500)
    t.same(await store.extend([held], 3), [true])
    t.same(await store.extend([{ fingerprint: 'orphan', token: 'someone-else' }], 3), [false])
    await sleep(700)
    t.same(await store.claim(['held'], 1), ['processing'], 'extended past its first lifetime')
    t.same(await store.extend([orphan], 30), [false], 'a claim past its lifetime is lapsed, not renewed, even before anyone takes it')
    const [retaken] = await store.claim(['orphan'], 30)
    t.ok(isClaim(retaken), 'the orphaned claim expired (a foreign extend did not keep it)')
    t.same(await store.extend([orphan, retaken as StoreClaim], 30), [false, true], 'the lapsed claim stays lost; the new holder\'s is held')
    t.same(await store.has(['orphan', 'held']), [false, false], 'an expired claim never looks done')
  })

  t.test('lifetimes are validated', async (t) => {
    const store = await make()
    await t.rejects(store.claim(['v'], 0), { name: 'TypeError', message: /lifetimeSeconds/ })
    await t.rejects(store.extend([{ fingerprint: 'v', token: 'x' }], 1.5), { name: 'TypeError', message: /lifetimeSeconds/ })
  })

  t.test('add reports which fingerprints were new; duplicates within a batch count once', async (t) => {
    const store = await make()
    t.same(await store.add(['a', 'b', 'a']), [true, true, false])
    t.same(await store.add(['b', 'c']), [false, true])
    t.same(await store.has(['a', 'b', 'c', 'd']), [true, true, true, false])
    t.same(await store.has([]), [])
    t.same(await store.add([]), [])
  })
}
