import { ReplayStoreError } from './errors.js'

/**
 * The few ioredis methods the Redis stores call, typed structurally so ioredis is not a
 * dependency of this library: pass your own `ioredis` client (as with @fastify/redis).
 * An `ioredis` `Redis` or `Cluster` instance fits as is. To a Cluster (or a client of unknown
 * kind) the stores send one key per command, so no command spans the slots of a Redis Cluster;
 * to an ioredis `Redis` (`isCluster === false`), a batch goes as one multi-key command.
 */
export interface RedisClientLike {
  get (key: string): Promise<string | null>
  /** Used on a single Redis (not a Cluster) to read a batch in one command. */
  mget? (...keys: string[]): Promise<Array<string | null>>
  del (...keys: string[]): Promise<number>
  eval (script: string, numkeys: number, ...args: Array<string | number>): Promise<unknown>
  evalsha (sha1: string, numkeys: number, ...args: Array<string | number>): Promise<unknown>
  /** Needed only with `waitForReplicas`: a write and its `WAIT` go to the key's node together. */
  pipeline? (): RedisPipelineLike
  /** An ioredis `Cluster`'s: asked for after a redirect the stores did not follow. */
  refreshSlotsCache? (): void
}

/** The part of an ioredis pipeline the stores use with `waitForReplicas`. */
export interface RedisPipelineLike {
  eval (script: string, numkeys: number, ...args: Array<string | number>): unknown
  evalsha (sha1: string, numkeys: number, ...args: Array<string | number>): unknown
  wait (numreplicas: number, timeout: number): unknown
  exec (): Promise<Array<[error: Error | null, result: unknown]> | null>
}

/** Options shared by the Redis stores. */
export interface RedisStoreOptions {
  /**
   * Longest wait for one store call, in ms, after which it fails with `ReplayStoreError`
   * (the route answers 503). A guard on top of ioredis' own `commandTimeout`, so a
   * misconfigured client (offline queue on, no timeout) cannot hang requests.
   * @default 1000 (milliseconds)
   */
  timeout?: number
  /**
   * Replicas that must have each claim and done mark before the store call succeeds: the
   * write is followed by Redis `WAIT` on the same connection. With replicas, a master can
   * die and a replica take over; replication is asynchronous, so without this a claim or
   * mark acknowledged just before the failover can be lost, and an event handled again.
   * When fewer replicas acknowledge within `waitTimeout`, the call fails with
   * `ReplayStoreError` (the delivery gets 503, never a 2xx without a durable claim).
   * Set it only where every master has that many replicas (after a failover, the promoted
   * replica needs one of its own before its claims succeed), and give the store its own client:
   * `WAIT` holds the connection it runs on. `0`: do not wait.
   * @default 0
   */
  waitForReplicas?: number
  /**
   * Longest wait, in ms, for the `waitForReplicas` acknowledgements; below `timeout`, and below
   * the client's `commandTimeout` (`WAIT` holds the connection it runs on meanwhile).
   * @default 100 (milliseconds; or `timeout - 1` when that is shorter)
   */
  waitTimeout?: number
}

/** What `waitForReplicas` / `waitTimeout` ask for, validated; null when not waiting. */
export interface ReplicaWait {
  readonly count: number
  readonly timeout: number
}

export function checkClient (client: unknown, name: string): asserts client is RedisClientLike {
  const c = client as Record<string, unknown> | null
  if (typeof c !== 'object' || c === null || !['get', 'del', 'eval', 'evalsha'].every((m) => typeof c[m] === 'function')) {
    throw new TypeError(`${name} needs an ioredis client, a Redis or a Cluster (with get, del, eval and evalsha)`)
  }
}

export function checkTimeout (timeout: unknown): number {
  if (timeout === undefined) return 1000
  if (typeof timeout !== 'number' || !Number.isSafeInteger(timeout) || timeout < 1) throw new TypeError('timeout must be a positive integer number of milliseconds')
  return timeout
}

export function checkReplicaWait (client: RedisClientLike, options: RedisStoreOptions, timeout: number): ReplicaWait | null {
  const count = options.waitForReplicas ?? 0
  if (typeof count !== 'number' || !Number.isSafeInteger(count) || count < 0) throw new TypeError('waitForReplicas must be a non-negative integer (the replicas that must acknowledge each write; 0 to not wait)')
  const waitTimeout = options.waitTimeout ?? Math.min(100, timeout - 1)
  if (typeof waitTimeout !== 'number' || !Number.isSafeInteger(waitTimeout) || waitTimeout < 1 || waitTimeout >= timeout) {
    throw new TypeError(`waitTimeout must be a positive integer number of milliseconds below timeout (${timeout})`)
  }
  if (count === 0) return null
  if (typeof client.pipeline !== 'function') throw new TypeError('waitForReplicas needs an ioredis client with pipeline()')
  return { count, timeout: waitTimeout }
}

export function checkPrefix (prefix: unknown): string {
  if (typeof prefix !== 'string' || prefix.length === 0) throw new TypeError('prefix must be a non-empty string')
  return prefix
}

/**
 * True only for a client that says it is a single Redis (an ioredis `Redis`: `isCluster === false`),
 * where one command may touch many keys. A Cluster, or a client of unknown kind, is not.
 */
export function isSingleRedis (client: RedisClientLike): boolean {
  return (client as { isCluster?: unknown }).isCluster === false
}

/**
 * A per-key Lua operation, `op(key, shared..., own...)` (`shared` arguments common to a batch, then
 * `own` arguments of that key), written once and run two ways: `perKey`, a one-key script
 * (ARGV: shared, then own), for a Cluster; `multiKey`, the same function over every key of a batch
 * in one script (ARGV: shared, then each key's own in key order), answering an array, for a
 * single Redis.
 */
export class KeyOperation {
  readonly perKey: LuaScript
  readonly multiKey: LuaScript
  readonly shared: number
  readonly own: number

  /** `fn`: Lua source defining `local function op (key, ...)`. */
  constructor (fn: string, shared: number, own: number) {
    this.shared = shared
    this.own = own
    const sharedArgs = Array.from({ length: shared }, (_v, j) => `, ARGV[${j + 1}]`).join('')
    const ownArgs = (at: (j: number) => string): string => Array.from({ length: own }, (_v, j) => `, ARGV[${at(j)}]`).join('')
    this.perKey = new LuaScript(`${fn}
return op(KEYS[1]${sharedArgs}${ownArgs((j) => String(shared + j + 1))})`)
    this.multiKey = new LuaScript(`${fn}
local out = {}
for i = 1, #KEYS do
  out[i] = op(KEYS[i]${sharedArgs}${ownArgs((j) => `${shared + j + 1} + (i - 1) * ${own}`)})
end
return out`)
  }
}

/**
 * Runs `op` over every key in ONE multi-key script (a single Redis only: the keys may span
 * slots), followed by `WAIT` on the same connection with `wait`. Answers one reply per key.
 * The caller wraps it in `guarded`.
 */
export async function runMultiKey (client: RedisClientLike, operation: string, op: KeyOperation, keys: readonly string[],
  shared: Array<string | number>, own: (i: number) => Array<string | number>, wait: ReplicaWait | null, abandoned: () => boolean): Promise<unknown[]> {
  const script = op.multiKey
  const sha1 = await script.sha1()
  const args = [...shared]
  if (op.own > 0) keys.forEach((_k, i) => { for (const a of own(i)) args.push(a) })
  let reply: unknown
  if (wait === null) {
    reply = await script.run(client, [...keys], args, abandoned, sha1)
  } else {
    const send = async (load: boolean): Promise<Array<[Error | null, unknown]> | null> => {
      const pipeline = client.pipeline!()
      if (load) pipeline.eval(script.source, keys.length, ...keys, ...args)
      else pipeline.evalsha(sha1, keys.length, ...keys, ...args)
      pipeline.wait(wait.count, wait.timeout)
      return await pipeline.exec()
    }
    let replies = await send(false)
    // NOSCRIPT: nothing ran; loaded with EVAL unless the caller gave up meanwhile.
    if (replies?.[0]?.[0]?.message.startsWith('NOSCRIPT') === true && !abandoned()) replies = await send(true)
    if (replies === null || replies.length !== 2) throw new ReplayStoreError(operation, `Redis answered ${operation} with an unexpected reply.`)
    const [[err, value], [waitErr, acks]] = replies as [[Error | null, unknown], [Error | null, unknown]]
    if (err !== null) throw err
    if (waitErr !== null) throw waitErr
    if (typeof acks !== 'number' || acks < wait.count) {
      throw new ReplayStoreError(operation, `Only ${String(acks)} of ${wait.count} Redis replicas acknowledged ${operation} within ${wait.timeout} ms.`)
    }
    reply = value
  }
  if (!Array.isArray(reply) || reply.length !== keys.length) throw new ReplayStoreError(operation, `Redis answered ${operation} with an unexpected reply.`)
  return reply
}

/** A Lua script run by SHA (one round trip), loaded with EVAL on the first NOSCRIPT. */
export class LuaScript {
  readonly source: string
  /** Its SHA-1 (hex), what EVALSHA names it by: computed at the first run (WebCrypto's digest is async). */
  #sha1: string | undefined

  constructor (source: string) {
    this.source = source
  }

  /** Its SHA-1 (hex): awaiting it once before a batch of `run`s sends them all in the same tick. */
  async sha1 (): Promise<string> {
    if (this.#sha1 !== undefined) return this.#sha1
    const digest = new Uint8Array(await crypto.subtle.digest('SHA-1', new TextEncoder().encode(this.source)))
    this.#sha1 = Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('')
    return this.#sha1
  }

  /** `abandoned`: once it returns true (the caller gave up), a NOSCRIPT is not retried with EVAL, so the script never runs late. */
  async run (client: RedisClientLike, keys: string[], args: Array<string | number>, abandoned: () => boolean = () => false, sha1?: string): Promise<unknown> {
    try {
      return await client.evalsha(sha1 ?? this.#sha1 ?? await this.sha1(), keys.length, ...keys, ...args)
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT') || abandoned()) throw err
      return await client.eval(this.source, keys.length, ...keys, ...args)
    }
  }
}

/**
 * ioredis queues commands while it is disconnected (its default offline queue) and sends them
 * on reconnect, possibly long after the caller gave up on them. A write that must not take
 * effect late is not sent at all unless the client is connected: this throws `ReplayStoreError`
 * for a client whose `status` says it is not (`'wait'`, a lazy client not connected yet, is let
 * through: sending connects it). Clients without a `status` are not checked.
 */
export function assertConnected (client: RedisClientLike, operation: string): void {
  const status = (client as { status?: unknown }).status
  if (typeof status === 'string' && status !== 'ready' && status !== 'wait') {
    throw new ReplayStoreError(operation, `Redis is not connected (${status}): ${operation} was not sent.`)
  }
}

/**
 * Runs one store call so that every failure (connection refused, offline, timeout,
 * a synchronous throw) becomes a `ReplayStoreError` rejection, and a call never waits
 * longer than `timeoutMs`. A late settle of the abandoned call is swallowed, so it can
 * never surface as an unhandled rejection. `onAbandon` runs when the call is given up on
 * (timed out) while it may still run.
 */
export async function guarded<T> (operation: string, timeoutMs: number, call: () => Promise<T>, onAbandon?: () => void): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  let pending: Promise<T>
  try {
    pending = Promise.resolve(call())
  } catch (err) {
    throw storeError(operation, err)
  }
  pending.catch(() => {})
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => {
      onAbandon?.()
      reject(new ReplayStoreError(operation, `Redis did not answer ${operation} within ${timeoutMs} ms.`))
    }, timeoutMs)
  })
  try {
    return await Promise.race([pending, timeout])
  } catch (err) {
    throw storeError(operation, err)
  } finally {
    clearTimeout(timer)
  }
}

function storeError (operation: string, err: unknown): ReplayStoreError {
  if (err instanceof ReplayStoreError) return err
  const reason = err instanceof Error ? err.message : String(err)
  return new ReplayStoreError(operation, `Redis ${operation} failed: ${reason}`, { cause: err })
}

/** CRC16-XMODEM, the hash of Redis Cluster key slots. */
function crc16 (bytes: Uint8Array): number {
  let crc = 0
  for (const byte of bytes) {
    crc ^= byte << 8
    for (let i = 0; i < 8; i++) crc = (crc & 0x8000) !== 0 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  }
  return crc
}

const encoder = new TextEncoder()

/** The Redis Cluster slot of `key` (a `{hash tag}` hashes alone), as `CLUSTER KEYSLOT` answers. */
export function keySlot (key: string): number {
  const bytes = encoder.encode(key)
  const open = bytes.indexOf(0x7b)
  if (open !== -1) {
    const close = bytes.indexOf(0x7d, open + 1)
    if (close > open + 1) return crc16(bytes.subarray(open + 1, close)) % 16384
  }
  return crc16(bytes) % 16384
}

/**
 * The indices of `keys` grouped by the node that serves them now: one group on a single
 * Redis; on an ioredis `Cluster`, by its slot map (a stale map only costs a redirect error,
 * which fails the call).
 */
function byNode (client: RedisClientLike, keys: readonly string[]): number[][] {
  const c = client as { isCluster?: unknown, slots?: unknown }
  if (c.isCluster !== true || !Array.isArray(c.slots)) return [keys.map((_k, i) => i)]
  const slots = c.slots as Array<readonly string[] | undefined>
  const groups = new Map<string, number[]>()
  keys.forEach((key, i) => {
    const slot = keySlot(key)
    const node = slots[slot]?.[0] ?? `slot ${slot}`
    const group = groups.get(node)
    if (group === undefined) groups.set(node, [i])
    else group.push(i)
  })
  return [...groups.values()]
}

/** A cluster redirect: the command did not run there; ioredis redirects it when sent alone. */
function isRedirect (err: Error): boolean {
  return /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /.test(err.message)
}

/**
 * Runs `script` once per key (one key per command, so no command spans cluster slots), the keys
 * of each node in one pipeline: one write and about one round trip per node. With `wait`, the
 * pipeline ends with `WAIT` for `wait.count` replicas (so on the connection that wrote), and
 * fewer acknowledgements reject with `ReplayStoreError`. A command a cluster redirected
 * (a moved slot) is sent again alone, which ioredis follows; with `wait`, it fails the call.
 * A client without `pipeline` gets the commands one by one, in the same tick.
 * The caller wraps it in `guarded`.
 */
export async function runScript (client: RedisClientLike, operation: string, script: LuaScript, keys: readonly string[],
  args: (i: number) => Array<string | number>, wait: ReplicaWait | null, abandoned: () => boolean): Promise<unknown[]> {
  const sha1 = await script.sha1()
  // One command alone, or a client without pipelines: plain commands, sent in the same tick.
  if (typeof client.pipeline !== 'function' || (wait === null && keys.length === 1)) {
    return await Promise.all(keys.map(async (key, i) => await script.run(client, [key], args(i), abandoned, sha1)))
  }
  const results: unknown[] = new Array(keys.length)
  const runGroup = async (group: number[], loadScript: boolean): Promise<void> => {
    const pipeline = client.pipeline!()
    for (const i of group) {
      if (loadScript) pipeline.eval(script.source, 1, keys[i]!, ...args(i))
      else pipeline.evalsha(sha1, 1, keys[i]!, ...args(i))
    }
    if (wait !== null) pipeline.wait(wait.count, wait.timeout)
    const replies = await pipeline.exec()
    if (replies === null || replies.length !== group.length + (wait === null ? 0 : 1)) throw new ReplayStoreError(operation, `Redis answered ${operation} with an unexpected reply.`)
    const noScript: number[] = []
    const redirected: number[] = []
    for (const [j, i] of group.entries()) {
      const [err, value] = replies[j]!
      if (err === null) results[i] = value
      else if (!loadScript && err.message.startsWith('NOSCRIPT')) noScript.push(i)
      else if (wait === null && isRedirect(err)) redirected.push(i)
      else {
        // The slots moved (a failover): learn where they are now, for the retry.
        if (isRedirect(err)) client.refreshSlotsCache?.()
        throw err
      }
    }
    if (wait !== null) {
      const [waitErr, acks] = replies[group.length]!
      if (waitErr !== null) throw waitErr
      if (typeof acks !== 'number' || acks < wait.count) {
        throw new ReplayStoreError(operation, `Only ${String(acks)} of ${wait.count} Redis replicas acknowledged ${operation} within ${wait.timeout} ms.`)
      }
    }
    if (abandoned()) return
    // A node that did not know the script yet (a promoted replica): load it, for those keys only.
    if (noScript.length > 0) await runGroup(noScript, true)
    await Promise.all(redirected.map(async (i) => { results[i] = await script.run(client, [keys[i]!], args(i), abandoned, sha1) }))
  }
  await Promise.all(byNode(client, keys).map(async (group) => { await runGroup(group, false) }))
  return results
}
