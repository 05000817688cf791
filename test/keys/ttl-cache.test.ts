// The key store's cache (src/keys/ttl-cache.ts): bounded, least recently used out first, entries
// stale after their TTL as lru-cache counts it (fresh at exactly ttl ms, stale after), a stale key
// kept for the store's fallback when asked to.
import t from 'tap'
import { TtlCache } from '../../src/keys/ttl-cache.js'

function clock () {
  let ms = 1_000_000
  return { now: () => ms, advance: (by: number) => { ms += by } }
}

t.test('holds at most max entries, evicting the least recently used (a get counts as a use, has does not)', async (t) => {
  const c = clock()
  const cache = new TtlCache<string, number>({ max: 3, ttl: 1000, now: c.now })
  cache.set('a', 1)
  cache.set('b', 2)
  cache.set('c', 3)
  t.equal(cache.get('a'), 1) // a is now the most recent: b is the oldest
  t.ok(cache.has('b'))
  cache.set('d', 4)
  t.equal(cache.size, 3)
  t.equal(cache.get('b'), undefined, 'b went first')
  t.same(['a', 'c', 'd'].map((k) => cache.get(k)), [1, 3, 4])
  cache.set('a', 10) // setting again moves it to the newest place
  cache.set('e', 5)
  t.equal(cache.get('c'), undefined, 'c was then the oldest')
  t.equal(cache.get('a'), 10)
})

t.test('an entry is fresh for exactly its TTL, then gone (or kept stale with keepStale)', async (t) => {
  const c = clock()
  const dropping = new TtlCache<string, string>({ max: 10, ttl: 1000, now: c.now })
  const keeping = new TtlCache<string, string>({ max: 10, ttl: 1000, now: c.now, keepStale: true })
  for (const cache of [dropping, keeping]) {
    cache.set('k', 'v')
    cache.set('short', 'v', 10)
  }
  c.advance(10)
  t.equal(dropping.get('short'), 'v', 'fresh at exactly its own TTL')
  c.advance(1)
  t.equal(dropping.get('short'), undefined, 'stale one millisecond later')
  t.equal(dropping.get('short', true), undefined, 'and dropped: not even a stale read finds it')
  c.advance(989)
  t.ok(dropping.has('k'))
  c.advance(1)
  t.notOk(dropping.has('k'))
  t.equal(dropping.get('k'), undefined)
  t.equal(dropping.size, 0)

  t.equal(keeping.get('k'), undefined, 'a stale entry is not returned')
  t.equal(keeping.get('k', true), 'v', 'but kept for a stale read')
  t.equal(keeping.size, 2)
  keeping.set('k', 'w')
  t.equal(keeping.get('k'), 'w', 'set again: fresh')
  keeping.delete('k')
  t.equal(keeping.get('k', true), undefined)
  keeping.clear()
  t.equal(keeping.size, 0)
})

t.test('the most recent key, deleted and set again, is ordered correctly', async (t) => {
  const c = clock()
  const cache = new TtlCache<string, number>({ max: 2, ttl: 1000, now: c.now })
  cache.set('a', 1)
  cache.set('b', 2)
  cache.delete('b')
  cache.get('a')
  cache.set('b', 2)
  cache.set('c', 3)
  t.equal(cache.get('a'), undefined, 'a was the least recently used')
  t.equal(cache.get('b'), 2)
  t.equal(cache.get('c'), 3)
})
