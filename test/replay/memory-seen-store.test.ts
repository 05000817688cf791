// MemoryClaimStore keeps fingerprints as 256-bit records in typed arrays
// (src/replay/fingerprint-table.ts). These tests pin what that must not change: any string is a
// key of its own (fingerprint-shaped or not), and the store answers as a plain Map of strings
// in write order would, through growth, removals, expiry and eviction.
import { createHash } from 'node:crypto'
import t, { type Test } from 'tap'
import { MemoryClaimStore, type StoreClaim, type StoreClaimResult } from '../../src/index.js'
import { CLAIMED, DONE, PROCESSING, REPEATED, synchronousClaims, type SynchronousClaims } from '../../src/replay/memory-claim-store.js'

const isClaim = (r: StoreClaimResult | undefined): r is StoreClaim => typeof r === 'object'
const fingerprint = (n: number | string): string => createHash('sha256').update(`event-${n}`).digest('base64url')

/** Date.now as the test says: the store reads no other clock. */
function fakeClock (t: Test): { advance: (ms: number) => void } {
  const real = Date.now
  let now = real()
  Date.now = () => now
  t.teardown(() => { Date.now = real })
  return { advance: (ms) => { now += ms } }
}

t.test('every string is a key of its own: canonical fingerprints, near misses and other strings', async (t) => {
  const A42 = 'A'.repeat(42)
  const keys = [
    A42 + 'A', // canonical: 256 zero bits
    A42 + 'B', A42 + 'C', A42 + 'D', // the same 256 bits with non-zero padding bits: not canonical
    A42 + 'E', // canonical (E = 4 << 0: its last 2 bits are 0)
    A42 + '=', A42 + '+', A42 + '/', A42 + ' ', A42 + '\u0141', A42 + '\u00c1', // \u0141 and \u00c1 are 'A' in their low 7 bits
    '\u0141' + A42, A42.slice(1) + 'BA', A42 + 'A ', A42,
    'fp-1', '', 'a', '\ud800', '\ufffd', '\ud800x', '\ufffdx', 'é', 'e\u0301',
    fingerprint(1), fingerprint(1).toUpperCase(), fingerprint(1).slice(0, 42) + '-', fingerprint(2),
    // A hashed key's own input, spelled as a fingerprint: still a key of its own.
    createHash('sha256').update('mailchannels-webhooks seen-events key\nfp-1').digest('base64url'),
  ]
  t.equal(new Set(keys).size, keys.length, 'the test keys are distinct strings')
  for (const key of keys) {
    const store = new MemoryClaimStore()
    t.same(await store.add([key]), [true], JSON.stringify(key))
    t.same(await store.has(keys), keys.map((k) => k === key), `only ${JSON.stringify(key)} is marked`)
  }
  const all = new MemoryClaimStore()
  t.same(await all.add(keys), keys.map(() => true))
  t.equal(all.size, keys.length)
  t.same(await all.add(keys), keys.map(() => false), 'each is remembered under its own key')
  await all.delete([A42 + 'B', '\ud800'])
  t.same(await all.has(keys), keys.map((k) => k !== A42 + 'B' && k !== '\ud800'), 'deleting one forgets no other')
})

t.test('grows across many doublings and remembers every key', async (t) => {
  const store = new MemoryClaimStore({ max: 300_000 })
  const fps = Array.from({ length: 250_000 }, (_, i) => i % 5 === 0 ? `key-${i}` : fingerprint(i))
  for (let i = 0; i < fps.length; i += 10_000) t.ok((await store.add(fps.slice(i, i + 10_000))).every((x) => x), 'all new')
  t.equal(store.size, fps.length)
  t.ok((await store.has(fps)).every((x) => x), 'every key is found after the growth')
  t.ok((await store.has(fps.map((_, i) => fingerprint(`other-${i}`)))).every((x) => !x), 'no other key is')
})

t.test('forgetting and writing keys over and over (the ring is compacted, the index shifts back) keeps the right ones', async (t) => {
  const store = new MemoryClaimStore({ max: 1000 })
  const live = new Set<string>()
  const forgotten: string[] = []
  let n = 0
  for (let i = 0; i < 1000; i++) { const fp = fingerprint(n++); live.add(fp); await store.add([fp]) }
  let seed = 7
  const next = (): number => { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; return seed }
  for (let round = 0; round < 20_000; round++) {
    const members = [...live]
    const gone = members[next() % members.length]!
    await store.delete([gone])
    live.delete(gone)
    forgotten.push(gone)
    const fp = fingerprint(n++)
    live.add(fp)
    await store.add([fp])
    if (round % 2000 === 0) t.same(await store.has([gone, fp]), [false, true], `round ${round}`)
  }
  t.equal(store.size, live.size)
  t.ok((await store.has([...live])).every((x) => x), 'every live key is found')
  t.ok((await store.has(forgotten)).every((x) => !x), 'no deleted key is')
})

t.test('when full, the oldest written is forgotten first, with deletions in between', async (t) => {
  const store = new MemoryClaimStore({ max: 3 })
  const [a, b, c, d, e, f] = ['a', 'b', 'c', 'd', 'e', 'f'].map(fingerprint) as [string, string, string, string, string, string]
  await store.add([a, b, c])
  await store.delete([b])
  await store.add([d])
  t.same(await store.has([a, b, c, d]), [true, false, true, true], 'a deletion made room: nothing forgotten')
  await store.add([e])
  t.same(await store.has([a, c, d, e]), [false, true, true, true], 'the oldest (a) went first')
  const [claim] = await store.claim([c], 30) // done: stays where it was written
  t.equal(claim, 'done')
  await store.delete([d])
  await store.add([f, b])
  t.same(await store.has([c, d, e, f, b]), [false, false, true, true, true], 'c, written first, went next')
  t.equal(store.size, 3)
})

t.test('an entry written again after it expired is the newest; one overwritten while live keeps its place', async (t) => {
  const clock = fakeClock(t)
  const store = new MemoryClaimStore({ max: 3, ttl: 10 })
  const [a, b, c, d] = ['a', 'b', 'c', 'd'].map(fingerprint) as [string, string, string, string]
  const claims = (await store.claim([a], 1)).filter(isClaim)
  await store.add([b, c])
  clock.advance(1500) // a's claim expired
  t.ok(isClaim((await store.claim([a], 30))[0]), 'the expired claim is free')
  await store.complete(claims) // a stale claim's complete still writes the done mark, in place
  await store.add([d])
  t.same(await store.has([a, b, c, d]), [true, false, true, true], 'b was the oldest written: a moved to the end')
})

t.test('a batch larger than the store once it has forgotten some: the newest stay', async (t) => {
  const store = new MemoryClaimStore({ max: 10 })
  const early = Array.from({ length: 40 }, (_, i) => fingerprint(`early-${i}`))
  for (const fp of early) await store.add([fp]) // the oldest are forgotten one by one
  const batch = Array.from({ length: 100 }, (_, i) => fingerprint(`batch-${i}`))
  t.ok((await store.add(batch)).every((x) => x), 'all new')
  t.equal(store.size, 10)
  t.same(await store.has(batch), batch.map((_, i) => i >= 90), 'the last 10 written are remembered')
  t.ok((await store.has(early)).every((x) => !x), 'none of the earlier ones')
})

t.test('a claim that expired, claimed again when the table is as full as it gets before growing, is the newest', async (t) => {
  const clock = fakeClock(t)
  const store = new MemoryClaimStore({ max: 40 })
  const x = fingerprint('x')
  const others = Array.from({ length: 31 }, (_, i) => fingerprint(`other-${i}`))
  await store.claim([x], 1)
  await store.add(others)
  clock.advance(1500)
  t.ok(isClaim((await store.claim([x], 30))[0]), 'the expired claim is free')
  const more = Array.from({ length: 9 }, (_, i) => fingerprint(`more-${i}`))
  await store.add(more) // 41 written: one forgotten
  t.equal(store.size, 40)
  await store.add([fingerprint('last')])
  t.same(await store.has([others[0]!, others[1]!, others[2]!]), [false, false, true], 'the oldest written went first')
  t.same(await store.claim([x], 30), ['processing'], 'x, claimed again after the others, stays')
})

t.test('a done mark lands on its own fingerprint even when the claimed array was changed since', async (t) => {
  const store = new MemoryClaimStore()
  const [a, b, c] = ['a', 'b', 'c'].map(fingerprint) as [string, string, string]
  const fps = [a, b]
  const claims = await store.claim(fps, 30)
  fps[0] = c
  await store.complete([{ fingerprint: c, token: 'any' }])
  t.same(await store.has([a, b, c]), [false, false, true], 'c is done, a still only claimed')
  t.same(await store.claim([a], 30), ['processing'])
  await store.complete(claims.filter(isClaim))
  t.same(await store.has([a, b, c]), [true, true, true])
})

/**
 * The store as a Map of strings in insertion order (the implementation it replaces): the model
 * the table must answer like.
 */
class ModelStore {
  readonly entries = new Map<string, { until: number } | { claim: { token: string, expires: number } }>()
  readonly epoch = Date.now()
  tokens = 0
  constructor (readonly max: number, readonly ttl: number) {}
  now (): number { return Date.now() - this.epoch }
  live (fp: string): { until: number } | { claim: { token: string, expires: number } } | undefined {
    const e = this.entries.get(fp)
    if (e === undefined) return undefined
    if (('until' in e ? e.until * 100 : e.claim.expires) > this.now()) return e
    this.entries.delete(fp)
    return undefined
  }

  doneMark (): { until: number } { return { until: Math.ceil(this.now() / 100) + this.ttl * 10 } }
  trim (): void { for (const k of this.entries.keys()) { if (this.entries.size <= this.max) break; this.entries.delete(k) } }
  has (fps: string[]): boolean[] { return fps.map((fp) => { const e = this.live(fp); return e !== undefined && 'until' in e }) }
  add (fps: string[]): boolean[] {
    const out = fps.map((fp) => { if (this.live(fp) !== undefined) return false; this.entries.set(fp, this.doneMark()); return true })
    this.trim()
    return out
  }

  delete (fps: string[]): void { for (const fp of fps) this.entries.delete(fp) }
  /** Claims under one shared claim (`token` for all): CLAIMED / PROCESSING / DONE / REPEATED. */
  claim (fps: string[], lifetime: number, shared: boolean, one = { token: `t${this.tokens++}`, expires: this.now() + lifetime * 1000 }): Array<{ state: number, token?: string }> {
    const expires = one.expires
    const out = fps.map((fp) => {
      const held = shared ? one : { token: `t${this.tokens++}`, expires }
      const e = this.live(fp)
      if (e !== undefined) return { state: 'until' in e ? DONE : e.claim === held ? REPEATED : PROCESSING }
      this.entries.set(fp, { claim: held })
      return { state: CLAIMED, token: held.token }
    })
    this.trim()
    return out
  }

  complete (fps: string[]): void { const mark = this.doneMark(); for (const fp of fps) this.entries.set(fp, mark); this.trim() }
  /** The claim `token` holds on `fp`, live or not. */
  held (fp: string, token: string): { token: string, expires: number } | undefined {
    const e = this.entries.get(fp)
    return e !== undefined && 'claim' in e && e.claim.token === token ? e.claim : undefined
  }
}

t.test('model-based: random operations answer as the Map model does', async (t) => {
  const clock = fakeClock(t)
  const A42 = 'A'.repeat(42)
  const pool = [...Array.from({ length: 24 }, (_, i) => fingerprint(i)), A42 + 'A', A42 + 'B', 'fp-1', 'fp-2', '', '\ud800', '\ufffd', A42 + '\u0141']
  for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
    let s = seed
    const rand = (n: number): number => { s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0; return s % n }
    const max = 1 + rand(12)
    const ttl = 1 + rand(3)
    const store = new MemoryClaimStore({ max, ttl })
    const model = new ModelStore(max, ttl)
    const sync = synchronousClaims(store) as SynchronousClaims
    // Claims handed out, each as the store's and the model's token for the same fingerprint.
    let claims: Array<{ real: StoreClaim, token: string }> = []
    let syncClaims: Array<{ real: object, held: { token: string, expires: number }, fps: string[] }> = []
    const batch = (): string[] => Array.from({ length: rand(6) }, () => pool[rand(pool.length)]!)
    const some = <T>(xs: T[]): T[] => xs.filter(() => rand(2) === 0)
    for (let step = 0; step < 1500; step++) {
      const where = `seed ${seed}, step ${step}`
      const op = rand(11)
      if (op === 0) {
        const fps = batch()
        if (JSON.stringify(await store.has(fps)) !== JSON.stringify(model.has(fps))) return t.fail(`has: ${where}`)
      } else if (op === 1) {
        const fps = batch()
        if (JSON.stringify(await store.add(fps)) !== JSON.stringify(model.add(fps))) return t.fail(`add: ${where}`)
      } else if (op === 2) {
        const fps = batch()
        await store.delete(fps)
        model.delete(fps)
      } else if (op === 3) {
        const fps = batch()
        const lifetime = 1 + rand(3)
        const got = await store.claim(fps, lifetime)
        const want = model.claim(fps, lifetime, false)
        for (let i = 0; i < fps.length; i++) {
          const g = got[i]!
          const w = want[i]!
          const state = isClaim(g) ? CLAIMED : g === 'done' ? DONE : PROCESSING
          if (state !== (w.state === REPEATED ? PROCESSING : w.state)) return t.fail(`claim ${i}: ${where}`)
          if (isClaim(g)) claims.push({ real: g, token: w.token! })
        }
      } else if (op === 4) {
        const picked = some(claims)
        await store.complete(picked.map((c) => c.real))
        model.complete(picked.map((c) => c.real.fingerprint))
      } else if (op === 5) {
        const picked = some(claims)
        await store.release(picked.map((c) => c.real))
        for (const c of picked) { const h = model.held(c.real.fingerprint, c.token); if (h !== undefined && h.expires > model.now()) model.delete([c.real.fingerprint]) }
      } else if (op === 6) {
        const picked = some(claims)
        const lifetime = 1 + rand(3)
        await store.extend(picked.map((c) => c.real), lifetime)
        for (const c of picked) { const h = model.held(c.real.fingerprint, c.token); if (h !== undefined) h.expires = model.now() + lifetime * 1000 }
      } else if (op === 7) {
        const fps = batch()
        const lifetime = 1 + rand(3)
        const results = new Uint8Array(fps.length)
        const real = sync.claim(fps, lifetime, results)
        const held = { token: `t${model.tokens++}`, expires: model.now() + lifetime * 1000 }
        const want = model.claim(fps, lifetime, true, held)
        if (JSON.stringify([...results]) !== JSON.stringify(want.map((w) => w.state))) return t.fail(`synchronous claim: ${where}`)
        syncClaims.push({ real, held, fps: fps.filter((_, i) => results[i] === CLAIMED) })
      } else if (op === 8 && syncClaims.length > 0) {
        const c = syncClaims[rand(syncClaims.length)]!
        const fps = some(c.fps)
        if (rand(2) === 0) {
          sync.complete(fps)
          model.complete(fps)
        } else {
          sync.release(c.real, fps)
          for (const fp of fps) { const e = model.entries.get(fp); if (e !== undefined && 'claim' in e && e.claim === c.held) model.delete([fp]) }
        }
      } else if (op === 9 && syncClaims.length > 0) {
        const c = syncClaims[rand(syncClaims.length)]!
        const lifetime = 1 + rand(3)
        sync.extend(c.real, lifetime)
        // The claim is shared: every entry it still holds lives on.
        c.held.expires = model.now() + lifetime * 1000
      } else {
        clock.advance(rand(4) === 0 ? rand(4000) : rand(300))
      }
      if (store.size !== model.entries.size) return t.fail(`size ${store.size}, model ${model.entries.size}: ${where}`)
      if (claims.length > 64) claims = claims.slice(-32)
      if (syncClaims.length > 16) syncClaims = syncClaims.slice(-8)
    }
    t.same(await store.has(pool), model.has(pool), `seed ${seed}: the same keys at the end`)
  }
})
