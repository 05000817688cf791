// On a single Redis (an ioredis `Redis`, isCluster === false) every store call of a batch is one
// multi-key command; a client of unknown kind gets one key per command, which works everywhere.
// Counted on the server (INFO commandstats), so what is asserted is what Redis really ran.
import t from 'tap'
import type { Redis } from 'ioredis'
import { RedisClaimStore, type StoreClaim, type StoreClaimResult, type RedisClientLike } from '../../src/index.js'
import { startRedisServer, waitFor } from './helpers/redis-server.js'

const isClaim = (r: StoreClaimResult | undefined): r is StoreClaim => typeof r === 'object'
const fps = (tag: string, n = 100): string[] => Array.from({ length: n }, (_v, i) => `${tag}-${i}`)

/** Calls per command since the last reset, as Redis counts them (commands run inside scripts included). */
async function commandCalls (client: Redis): Promise<Record<string, number>> {
  const info = await client.info('commandstats')
  const calls: Record<string, number> = {}
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[m[1]!] = Number(m[2])
  return calls
}

/** What `run` made Redis execute from the client (`evalsha`, `eval`, `mget`, ...; `del`/`get` include script-internal ones). */
async function counted (admin: Redis, run: () => Promise<unknown>): Promise<Record<string, number>> {
  await admin.config('RESETSTAT')
  await run()
  const calls = await commandCalls(admin)
  // The counting connection's own RESETSTAT and INFO are not part of the call.
  delete calls.info
  delete calls['config|resetstat']
  return calls
}

t.test('a single Redis: one command per batch, the same answers as one key per command', async (t) => {
  const server = await startRedisServer()
  t.teardown(async () => { await server.close() })
  const client = await server.client()
  const admin = await server.client()
  const store = new RedisClaimStore(client, { prefix: 'one:' })
  // Load the scripts once (the first run answers NOSCRIPT, then EVAL): the counts below are steady state.
  await store.release((await store.claim(['warm'], 30)).filter(isClaim))
  await store.extend([{ fingerprint: 'warm', token: 'x' }], 30)
  await store.complete([{ fingerprint: 'warm', token: 'x' }])
  await store.add(['warm2'])

  const keys = fps('a')
  let claims: StoreClaimResult[] = []
  t.same(await counted(admin, async () => { claims = await store.claim(keys, 30) }), { evalsha: 1, get: 100, set: 100 }, 'claim of 100: one EVALSHA')
  t.ok(claims.every(isClaim), 'all claimed')
  const mine = claims.filter(isClaim)
  t.not(mine[0]!.token, mine[1]!.token, 'each claim has its own token')
  t.same((await counted(admin, async () => { claims = await store.claim(keys, 30) })).evalsha, 1)
  t.ok(claims.every((c) => c === 'processing'), 'a second claim sees the live claims')

  const extendCalls = await counted(admin, async () => { await store.extend(mine, 60) })
  t.equal(extendCalls.evalsha, 1, 'extend of 100: one EVALSHA')
  t.equal(extendCalls.pexpire, 100, 'every token held: every claim extended')
  t.ok(Number(await client.pttl(`one:${keys[0]!}`)) > 30_000, 'the claim lives its new lifetime')
  t.equal((await counted(admin, async () => { await store.extend([{ fingerprint: keys[0]!, token: 'not-mine' }], 120) })).pexpire, undefined, 'another token extends nothing')

  t.same(await counted(admin, async () => { await store.complete(mine.slice(0, 50)) }), { evalsha: 1, set: 50 }, 'complete of 50: one EVALSHA')
  const releaseCalls = await counted(admin, async () => { await store.release(mine) })
  t.equal(releaseCalls.evalsha, 1, 'release of 100: one EVALSHA')
  t.equal(releaseCalls.del, 50, 'only the 50 claims still held are deleted, never a done mark')

  let seen: boolean[] = []
  t.same(await counted(admin, async () => { seen = await store.has(keys) }), { mget: 1 }, 'has of 100: one MGET')
  t.same(seen, keys.map((_k, i) => i < 50), 'done marks read as done, released claims as not')
  claims = await store.claim(keys, 30)
  t.same(claims.slice(0, 50), Array(50).fill('done'), 'a claim never overwrites a done mark')
  t.ok(claims.slice(50).every(isClaim), 'released events are claimed anew')
  t.same(await store.has(keys.slice(50)), Array(50).fill(false), 'a claim is not a done mark')

  let added: boolean[] = []
  const more = fps('b')
  t.same(await counted(admin, async () => { added = await store.add([...more, keys[0]!, keys[60]!]) }), { evalsha: 1, set: 102, get: 2 }, 'add of 102: one EVALSHA (a key already taken is read once: a cancelled claim\'s tombstones alone do not take it)')
  t.same(added, [...Array(100).fill(true), false, false], 'a done mark and a live claim both count as taken')

  await client.set('one:v1-mark', '1')
  t.same(await store.claim(['v1-mark'], 30), ['done'], 'the first version\'s mark reads as done')
  t.same(await store.has(['v1-mark']), [true])

  t.same(await counted(admin, async () => { await store.delete(more) }), { del: 1 }, 'delete of 100: one DEL')
  t.same(await store.has(more), Array(100).fill(false))

  // The same server through a client that does not say what it is: one key per command.
  const unknown: RedisClientLike = {
    get: async (key) => await client.get(key),
    del: async (...k) => await client.del(...k),
    eval: async (...a) => await client.eval(...(a as [string, number])),
    evalsha: async (...a) => await client.evalsha(...(a as [string, number])),
    pipeline: () => client.pipeline(),
  }
  const perKey = new RedisClaimStore(unknown, { prefix: 'one:' })
  await perKey.claim(['warm3', 'warm4'], 30) // loads the one-key script
  const c = fps('c')
  t.same(await counted(admin, async () => { claims = await perKey.claim(c, 30) }), { evalsha: 100, get: 100, set: 100 }, 'a client of unknown kind: one EVALSHA per key')
  t.ok(claims.every(isClaim))
  t.same(await store.claim(c, 30), Array(100).fill('processing'), 'both paths share one layout')
  await perKey.complete(claims.filter(isClaim))
  t.same(await store.has(c), Array(100).fill(true))
  t.same(await counted(admin, async () => { await perKey.has(c) }), { get: 100 })
})

t.test('a single Redis with waitForReplicas: one EVALSHA and one WAIT per batch, on the same connection', async (t) => {
  const primary = await startRedisServer()
  const replica = await startRedisServer()
  t.teardown(async () => { await replica.close(); await primary.close() })
  // A loaded machine can take well over 100 ms to replicate: generous bounds while the replica is up.
  const client = await primary.client({ commandTimeout: 3000 })
  const admin = await primary.client()
  const replicaClient = await replica.client()
  // Redis 7 delays a diskless full sync by 5 s by default, waiting for more replicas: not here.
  await admin.config('SET', 'repl-diskless-sync-delay', '0')
  await replicaClient.replicaof('127.0.0.1', primary.port)
  t.ok(await waitFor(async () => (await admin.info('replication')).includes('connected_slaves:1') &&
    (await replicaClient.info('replication')).includes('master_link_status:up'), 10_000), 'the replica follows')

  const store = new RedisClaimStore(client, { prefix: 'dur:', waitForReplicas: 1, waitTimeout: 1000, timeout: 2000 })
  // The first run of a script answers NOSCRIPT and is sent again with EVAL (and WAIT again): load them first.
  await store.complete((await store.claim(['warm'], 30)).filter(isClaim))
  const keys = fps('w')
  let claims: StoreClaimResult[] = []
  const calls = await counted(admin, async () => { claims = await store.claim(keys, 30) })
  t.equal(calls.evalsha, 1, 'one EVALSHA for 100 claims')
  t.equal(calls.wait, 1, 'then one WAIT')
  t.ok(claims.every(isClaim))
  // WAIT answered: the replica has every claim as soon as the call returns.
  t.equal((await replicaClient.mget(...keys.map((k) => `dur:${k}`))).filter((v) => v?.startsWith('c:') === true).length, 100, 'every claim is on the replica')
  const done = await counted(admin, async () => { await store.complete(claims.filter(isClaim)) })
  t.same([done.evalsha, done.wait], [1, 1], 'complete: one EVALSHA, one WAIT')
  t.same(await replicaClient.mget(...keys.map((k) => `dur:${k}`)), Array(100).fill('1'), 'every done mark is on the replica')

  // The replica gone: the write is acknowledged by no replica, so the call fails, and the claims are given back.
  await replica.stop()
  const lonely = fps('x', 10)
  const quick = new RedisClaimStore(client, { prefix: 'dur:', waitForReplicas: 1, waitTimeout: 100 })
  await t.rejects(quick.claim(lonely, 30), { name: 'ReplayStoreError', message: /Only 0 of 1 Redis replicas acknowledged claim/ })
  t.ok(await waitFor(async () => (await client.mget(...lonely.map((k) => `dur:${k}`))).every((v) => v === null), 2000), 'the unacknowledged claims are released')
})
