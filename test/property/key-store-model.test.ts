// The key-fetch budget (rows E1 E2 E6 in test/README.md): model-based test of the
// KeyStore against a real loopback key API: whatever sequence of lookups, concurrent bursts
// and clock jumps, fetches stay within the token-bucket budget, concurrent lookups of one
// key id share a single fetch, the caches stay within their caps, and every lookup ends in
// the key or a typed VerificationError.
import fc from 'fast-check'
import t from 'tap'
import { check, failOnUnhandledRejection, KEYS, startKeyServer } from './helpers/fixtures.js'
import { VerificationError } from '../../src/errors.js'
import { KeyStore } from '../../src/keys/key-store.js'
import { importEd25519PublicKey } from '../../src/keys/public-key.js'
import { sameKey } from '#crypto'

failOnUnhandledRejection(t)

const KNOWN = ['k0', 'k1', 'k2', 'k3', 'k4']
const UNKNOWN = ['u0', 'u1', 'u2', 'u3', 'u4', 'u5', 'u6']
const BUDGET = 10 // fetchesPerMinute (the default)
const MAX_KEYS = 3
const MAX_FAILURES = 4

interface Model { clock: number, start: number, fetchesAtStart: number }
interface Real { store: KeyStore, fetches: () => number, byId: Map<string, number>, expected: string }

function assertInvariants (m: Model, r: Real): void {
  const fetched = r.fetches() - m.fetchesAtStart
  const bound = BUDGET + Math.floor(((m.clock - m.start) * BUDGET) / 60_000)
  if (fetched > bound) throw new Error(`${fetched} fetches exceed the budget bound ${bound}`)
  const s = r.store.stats()
  if (s.fetches !== fetched) throw new Error(`stats().fetches ${s.fetches} != fetches seen by the server ${fetched}`)
  if (s.keys > MAX_KEYS) throw new Error(`${s.keys} keys held, cap ${MAX_KEYS}`)
  if (s.failures > MAX_FAILURES) throw new Error(`${s.failures} failures held, cap ${MAX_FAILURES}`)
}

async function lookup (r: Real, keyId: string): Promise<void> {
  try {
    const key = await r.store.get(keyId)
    if (!KNOWN.includes(keyId)) throw new Error(`a key was returned for unknown id ${keyId}`)
    if (!sameKey(key, importEd25519PublicKey(r.expected))) throw new Error('wrong key returned')
  } catch (err) {
    if (!(err instanceof VerificationError)) throw err
    const allowed = KNOWN.includes(keyId) ? ['key_unavailable'] : ['unknown_key', 'key_unavailable']
    if (!allowed.includes(err.type)) throw new Error(`lookup of ${keyId} failed with ${err.type}`)
  }
}

class Get implements fc.AsyncCommand<Model, Real> {
  constructor (readonly keyId: string) {}
  check (): boolean { return true }
  async run (m: Model, r: Real): Promise<void> {
    await lookup(r, this.keyId)
    assertInvariants(m, r)
  }

  toString (): string { return `get(${this.keyId})` }
}

class Burst implements fc.AsyncCommand<Model, Real> {
  constructor (readonly keyId: string, readonly n: number) {}
  check (): boolean { return true }
  async run (m: Model, r: Real): Promise<void> {
    const before = r.byId.get(this.keyId) ?? 0
    await Promise.all(Array.from({ length: this.n }, () => lookup(r, this.keyId)))
    const sent = (r.byId.get(this.keyId) ?? 0) - before
    if (sent > 1) throw new Error(`${this.n} concurrent lookups of ${this.keyId} sent ${sent} fetches (single flight broken)`)
    assertInvariants(m, r)
  }

  toString (): string { return `burst(${this.keyId} x${this.n})` }
}

class Advance implements fc.AsyncCommand<Model, Real> {
  constructor (readonly ms: number) {}
  check (): boolean { return true }
  async run (m: Model, r: Real): Promise<void> {
    m.clock += this.ms
    assertInvariants(m, r)
  }

  toString (): string { return `advance(${this.ms} ms)` }
}

const keyId = fc.constantFrom(...KNOWN, ...UNKNOWN)
const commands = fc.commands([
  keyId.map((k) => new Get(k)),
  fc.tuple(keyId, fc.integer({ min: 2, max: 20 })).map(([k, n]) => new Burst(k, n)),
  fc.constantFrom(100, 1_000, 6_000, 31_000, 61_000, 301_000, 3_601_000).map((ms) => new Advance(ms)),
], { maxCommands: 20 })

t.test('E1 E2 E6: KeyStore keeps fetches within budget, single flight, and caches within caps, for any command sequence', async (t) => {
  const server = await startKeyServer(Object.fromEntries(KNOWN.map((k) => [k, KEYS.publicKey])))
  t.teardown(server.close)
  // Requests per key id, for the single-flight check (the budget check uses the server's own count).
  const byId = new Map<string, number>()
  await check(t,
    fc.asyncProperty(commands, async (cmds) => {
      const model: Model = { clock: 1_700_000_000_000, start: 1_700_000_000_000, fetchesAtStart: server.fetches() }
      const store = new KeyStore({
        baseUrl: server.baseUrl,
        now: () => model.clock,
        maxKeys: MAX_KEYS,
        maxFailures: MAX_FAILURES,
        fetch: async (input, init) => {
          // The real global fetch to the real server: this wrapper only records which id was asked for.
          const id = new URL(String(input)).searchParams.get('id') ?? ''
          byId.set(id, (byId.get(id) ?? 0) + 1)
          return globalThis.fetch(input, init)
        },
      })
      await fc.asyncModelRun(() => ({ model, real: { store, fetches: server.fetches, byId, expected: KEYS.publicKey } }), cmds)
    }),
    100,
  )
})
