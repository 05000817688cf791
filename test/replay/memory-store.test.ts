// The per-delivery MemoryReplayStore (internal: the receivers' default store, the per-delivery face of a MemoryClaimStore
// of its own), and the claim store behind it, which the receivers claim deliveries from at once.
import { createHash } from 'node:crypto'
import t from 'tap'
import { MemoryClaimStore, deliveryClaimKey } from '../../src/index.js'
import { MemoryReplayStore } from '../../src/replay/memory-store.js'
import { deliveryId } from '../../src/replay/types.js'
import { claimStoreBehindMemory } from '../../src/replay/memory-store.js'
import { DONE, PROCESSING, synchronousClaims } from '../../src/replay/memory-claim-store.js'

const id = (n: number): string => { const sig = Buffer.alloc(64, 7); sig.writeUInt32BE(n); return deliveryId(sig) }

t.test('claim, complete and release follow the delivery lifecycle', async (t) => {
  const store = new MemoryReplayStore()
  t.equal(await store.claim(id(1), 360), 'claimed')
  t.equal(await store.claim(id(1), 360), 'processing', 'a second request while the first is handled')
  await store.complete(id(1), 360)
  t.equal(await store.claim(id(1), 360), 'done', 'a replay after success')
  await store.release(id(1))
  t.equal(await store.claim(id(1), 360), 'done', 'release never forgets a completed delivery')

  t.equal(await store.claim(id(2), 360), 'claimed')
  await store.release(id(2))
  t.equal(await store.claim(id(2), 360), 'claimed', 'a released claim is handled again (the retry after a 5xx)')
})

t.test('100 concurrent claims of one delivery: exactly one is claimed', async (t) => {
  const store = new MemoryReplayStore()
  const states = await Promise.all(Array.from({ length: 100 }, async () => await store.claim(id(7), 360)))
  t.equal(states.filter((s) => s === 'claimed').length, 1)
  t.equal(states.filter((s) => s === 'processing').length, 99)
})

t.test('entries expire after their TTL', async (t) => {
  const store = new MemoryReplayStore()
  await store.claim(id(3), 1)
  await store.complete(id(3), 1)
  t.equal(await store.claim(id(3), 1), 'done')
  await new Promise((resolve) => setTimeout(resolve, 1100))
  t.equal(await store.claim(id(3), 1), 'claimed', 'outside the freshness window the entry is gone')
})

t.test('stays at its cap, forgetting the oldest first', async (t) => {
  const store = new MemoryReplayStore({ max: 1000 })
  for (let i = 0; i < 5000; i++) {
    await store.claim(id(i), 360)
    await store.complete(id(i), 360)
  }
  t.equal(store.size, 1000)
  t.equal(await store.claim(id(4999), 360), 'done', 'the newest are remembered')
  t.equal(await store.claim(id(0), 360), 'claimed', 'the oldest were forgotten')
})

t.test('options and arguments are validated', async (t) => {
  t.throws(() => new MemoryReplayStore({ max: 0 }), { name: 'TypeError', message: /max/ })
  t.throws(() => new MemoryReplayStore({ max: 1.5 }), { name: 'TypeError', message: /max/ })
  const store = new MemoryReplayStore()
  await t.rejects(store.claim(id(1), 0), { name: 'TypeError', message: /ttlSeconds/ })
  await t.rejects(store.complete(id(1), Number.NaN), { name: 'TypeError', message: /ttlSeconds/ })
  t.equal(await store.claim(id(1), 1), 'claimed', 'a rejected claim wrote nothing')
})

t.test('deliveryId is the signature bytes, re-encoded: the same bytes give the same id, any other bytes another', async (t) => {
  const sig = Buffer.alloc(64, 1)
  t.equal(deliveryId(sig), deliveryId(Uint8Array.from(sig)))
  t.equal(deliveryId(sig), sig.toString('base64url'))
  t.match(deliveryId(sig), /^[A-Za-z0-9_-]{86}$/)
  for (let byte = 0; byte < 64; byte++) {
    const other = Buffer.from(sig)
    other[byte] = other[byte]! ^ 0x80
    t.not(deliveryId(other), deliveryId(sig), `a change in byte ${byte}`)
  }
})

t.test('deliveryClaimKey: a 43-character key of the signature bytes, tagged apart from event fingerprints', async (t) => {
  const sig = Buffer.alloc(64, 1)
  t.equal(deliveryClaimKey(sig), deliveryClaimKey(Uint8Array.from(sig)))
  t.match(deliveryClaimKey(sig), /^[A-Za-z0-9_-]{43}$/)
  t.equal(deliveryClaimKey(sig), createHash('sha256').update('mcwh-delivery-v1:' + deliveryId(sig)).digest('base64url'), 'the SHA-256 of the tag and the delivery id')
  for (let byte = 0; byte < 64; byte++) {
    const other = Buffer.from(sig)
    other[byte] = other[byte]! ^ 0x80
    t.not(deliveryClaimKey(other), deliveryClaimKey(sig), `a change in byte ${byte}`)
  }
})

t.test('the synchronous claims behind a MemoryReplayStore are the same store as its promises', async (t) => {
  const store = new MemoryReplayStore()
  const behind = claimStoreBehindMemory(store)
  const now = behind === null ? null : synchronousClaims(behind)
  if (now === null) throw new Error('a MemoryReplayStore has a memory claim store behind it')
  const sig = (n: number): Buffer => { const s = Buffer.alloc(64, 7); s.writeUInt32BE(n); return s }
  const key = (n: number): string => deliveryClaimKey(sig(n))
  const claim = now.claimKey(key(1), 360)
  if (typeof claim === 'number') throw new Error('a new delivery is claimed')
  t.equal(await store.claim(deliveryId(sig(1)), 360), 'processing', 'a claim made at once is seen by the promise API')
  now.completeKey(claim, 360)
  t.equal(await store.claim(deliveryId(sig(1)), 360), 'done')
  now.releaseKey(claim)
  t.equal(now.claimKey(key(1), 360), DONE, 'release never forgets a completed delivery')
  t.equal(await store.claim(deliveryId(sig(2)), 360), 'claimed')
  t.equal(now.claimKey(key(2), 360), PROCESSING, 'a claim made through the promise API is seen at once')
  await store.release(deliveryId(sig(2)))
  t.type(now.claimKey(key(2), 360), 'object', 'a released claim is handled again')
  t.throws(() => now.claimKey(key(3), 0), { name: 'TypeError', message: /lifetimeSeconds/ })
  t.equal(store.size, 2, 'a refused lifetime wrote nothing')
})

t.test('a one-key claim is released only by its own token', async (t) => {
  const store = new MemoryClaimStore()
  const now = synchronousClaims(store)!
  const key = deliveryClaimKey(Buffer.alloc(64, 5))
  const mine = now.claimKey(key, 1)
  if (typeof mine === 'number') throw new Error('claimed')
  now.releaseKey({ fingerprint: key, token: 'someone-else' })
  t.equal(now.claimKey(key, 1), PROCESSING, 'another token releases nothing')
  now.releaseKey(mine)
  t.type(now.claimKey(key, 1), 'object', 'its own token releases it')
})

t.test('no claim store behind a store whose methods are not the memory store\'s own', async (t) => {
  class Counting extends MemoryReplayStore {
    claims = 0
    override async claim (id: string, ttl: number): Promise<'claimed' | 'processing' | 'done'> { this.claims++; return await super.claim(id, ttl) }
  }
  t.equal(claimStoreBehindMemory(new Counting()), null, 'a subclass that overrides claim is called through it')
  const spied = new MemoryReplayStore()
  spied.release = async () => { throw new Error('down') }
  t.equal(claimStoreBehindMemory(spied), null, 'a method replaced on the instance is called')
  t.equal(claimStoreBehindMemory({ claim: async () => 'claimed', complete: async () => {}, release: async () => {} }), null, 'another store')
  t.not(claimStoreBehindMemory(new MemoryReplayStore()), null)
})
