import t from 'tap'
import { MemoryReplayStore, deliveryId } from '../../src/index.js'
import { synchronousClaims } from '../../src/replay/memory-store.js'

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

t.test('the synchronous claims are the same store as its promises', async (t) => {
  const store = new MemoryReplayStore()
  const now = synchronousClaims(store)
  if (now === null) throw new Error('a MemoryReplayStore has synchronous claims')
  t.equal(now.claim(id(1), 360), 'claimed')
  t.equal(await store.claim(id(1), 360), 'processing', 'a claim made at once is seen by the promise API')
  now.complete(id(1), 360)
  t.equal(await store.claim(id(1), 360), 'done')
  now.release(id(1))
  t.equal(now.claim(id(1), 360), 'done', 'release never forgets a completed delivery')
  await store.claim(id(2), 360)
  now.release(id(2))
  t.equal(now.claim(id(2), 360), 'claimed', 'a released claim is handled again')
  t.throws(() => now.claim(id(3), 0), { name: 'TypeError', message: /ttlSeconds/ })
  t.equal(store.size, 2, 'a refused ttl wrote nothing')
})

t.test('no synchronous claims for a store whose methods are not the memory store\'s own', async (t) => {
  class Counting extends MemoryReplayStore {
    claims = 0
    override async claim (id: string, ttl: number): Promise<'claimed' | 'processing' | 'done'> { this.claims++; return await super.claim(id, ttl) }
  }
  t.equal(synchronousClaims(new Counting()), null, 'a subclass that overrides claim is called through it')
  const spied = new MemoryReplayStore()
  spied.release = async () => { throw new Error('down') }
  t.equal(synchronousClaims(spied), null, 'a method replaced on the instance is called')
  t.equal(synchronousClaims({ claim: async () => 'claimed', complete: async () => {}, release: async () => {} }), null, 'another store')
  t.not(synchronousClaims(new MemoryReplayStore()), null)
})
