import t from 'tap'
import { MemoryReplayStore, deliveryId } from '../../src/index.js'

const id = (n: number): string => deliveryId(Buffer.from(`base ${n}`), Buffer.alloc(64, n % 256))

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

t.test('deliveryId depends on the base and on the signature', async (t) => {
  const base = Buffer.from('"content-digest": sha-256=:x:\n"@signature-params": ("content-digest");created=1')
  const sig = Buffer.alloc(64, 1)
  t.equal(deliveryId(base, sig), deliveryId(Buffer.from(base), Buffer.from(sig)))
  t.match(deliveryId(base, sig), /^[A-Za-z0-9_-]{43}$/)
  t.not(deliveryId(base, sig), deliveryId(base, Buffer.alloc(64, 2)))
  t.not(deliveryId(base, sig), deliveryId(Buffer.concat([base, Buffer.from('0')]), sig))
})
