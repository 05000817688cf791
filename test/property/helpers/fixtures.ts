import crypto, { type KeyObject } from 'node:crypto'
import fc from 'fast-check'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { parseDictionary, serializeInnerList, type InnerList } from 'structured-headers'
import { VerifyErrorType, type Result } from '../../../src/errors.js'

/**
 * The seed every property runs with: `FC_SEED` when set (to replay a CI failure), else a
 * constant, so CI is deterministic. fast-check prints the seed and the shrunk path on failure.
 */
export const SEED = process.env.FC_SEED !== undefined && process.env.FC_SEED !== '' ? Number(process.env.FC_SEED) : 20260521

/** Runs per property; `FC_RUNS` scales a local deep run. */
export function runs (n: number): number {
  const scale = Number(process.env.FC_RUNS_SCALE ?? '1')
  return Math.max(1, Math.round(n * (Number.isFinite(scale) && scale > 0 ? scale : 1)))
}

/** Every reason code verify may return: anything else (or a throw) is a bug. */
export const KNOWN_TYPES: ReadonlySet<string> = new Set<string>(Object.values(VerifyErrorType))

/** A dedicated signing key for the properties (deterministic per process is not needed). */
export const KEYS = (() => {
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ed25519')
  return {
    privateKey,
    publicKey: publicKey.export({ format: 'der', type: 'spki' }).toString('base64'),
  }
})()

/** A fixed "now" (ms) so every property is reproducible from its seed. */
export const NOW_MS = 1_763_769_600_000
export const NOW = Math.floor(NOW_MS / 1000)

export const BODY = '[{"email":"s@example.com","customer_handle":"acct_1","timestamp":1700000000,"event":"delivered","request_id":"r1"}]'

export function sha256Digest (body: Uint8Array | string): string {
  return `sha-256=:${crypto.hash('sha256', body, 'base64')}:`
}

/** The `@signature-params` value the verifier signs over: the canonical SF serialisation of the member (RFC 9421 §2.3). */
export function canonicalParams (params: string, label = 'sig_1'): string {
  const member = parseDictionary(`${label}=${params}`).get(label)
  if (member === undefined || !Array.isArray(member[0])) throw new Error('not an inner list')
  return serializeInnerList(member as InnerList)
}

export interface Delivery {
  body: Buffer
  headers: Record<string, string>
}

export interface SignOptions {
  body?: Uint8Array | string
  /** The Signature-Input member value after `label=`, verbatim on the wire. */
  params?: string
  created?: number
  keyId?: string
  label?: string
  contentDigest?: string
  key?: KeyObject
}

/** A correctly signed delivery; `params` is sent verbatim and signed in canonical form. */
export function sign (o: SignOptions = {}): Delivery {
  const label = o.label ?? 'sig_1'
  const body = Buffer.from(typeof o.body === 'string' ? Buffer.from(o.body, 'utf8') : (o.body ?? Buffer.from(BODY)))
  const contentDigest = o.contentDigest ?? sha256Digest(body)
  const params = o.params ?? `("content-digest");created=${o.created ?? NOW};alg="ed25519";keyid="${o.keyId ?? 'mckey'}"`
  const base = `"content-digest": ${contentDigest}\n"@signature-params": ${canonicalParams(params, label)}`
  const sig = crypto.sign(null, Buffer.from(base, 'latin1'), o.key ?? KEYS.privateKey)
  return {
    body,
    headers: {
      'content-digest': contentDigest,
      'signature-input': `${label}=${params}`,
      signature: `${label}=:${sig.toString('base64')}:`,
    },
  }
}

/** A typed rejection: `data` null, an `error` whose type is a known reason code. */
export function isTypedRejection (r: Result<unknown>): boolean {
  return r.data === null && r.error !== null && KNOWN_TYPES.has(r.error.type) && typeof r.error.message === 'string'
}

export interface KeyServer {
  baseUrl: string
  /** Requests to the public-key endpoint so far. */
  fetches: () => number
  close: () => Promise<void>
}

/** A real loopback key API that knows `keys` (id -> base64 SPKI) and answers 404 for every other id. */
export async function startKeyServer (keys: Record<string, string> = {}): Promise<KeyServer> {
  let count = 0
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://127.0.0.1')
    if (url.pathname === '/tx/v1/webhook/public-key') count++
    const id = url.searchParams.get('id')
    if (id !== null && Object.hasOwn(keys, id)) {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ id, key: keys[id] }))
      return
    }
    res.writeHead(404, { 'content-type': 'application/json' })
    res.end('{"errors":["not found"]}')
  })
  server.keepAliveTimeout = 1000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    fetches: () => count,
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

/**
 * `fc.assert` with the suite's seed, then one passing assertion naming the run count (a
 * failing property throws with fast-check's report: seed, path, counterexample).
 */
export async function check (t: { pass: (msg: string) => void }, prop: fc.IAsyncProperty<any> | fc.IProperty<any>, numRuns: number): Promise<void> {
  const n = runs(numRuns)
  await fc.assert(prop as fc.IAsyncProperty<unknown>, { seed: SEED, numRuns: n })
  t.pass(`${n} runs hold (seed ${SEED})`)
}

/** Fails the test run on any unhandled rejection (common rules: it must fail the suite). */
export function failOnUnhandledRejection (t: { teardown: (fn: () => void) => void, fail: (msg: string) => void }): void {
  const onRejection = (reason: unknown): void => { t.fail(`unhandled rejection: ${String(reason)}`) }
  process.on('unhandledRejection', onRejection)
  t.teardown(() => { process.off('unhandledRejection', onRejection) })
}
