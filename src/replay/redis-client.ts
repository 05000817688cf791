import { ReplayStoreError } from './errors.js'

/**
 * The few ioredis methods the Redis stores call, typed structurally so ioredis is not a
 * dependency of this library: pass your own `ioredis` client (as with @fastify/redis).
 * An `ioredis` `Redis` or `Cluster` instance fits as is. The stores send one key per
 * command, so no command spans the slots of a Redis Cluster.
 */
export interface RedisClientLike {
  get (key: string): Promise<string | null>
  del (...keys: string[]): Promise<number>
  eval (script: string, numkeys: number, ...args: Array<string | number>): Promise<unknown>
  evalsha (sha1: string, numkeys: number, ...args: Array<string | number>): Promise<unknown>
}

/** Options shared by the Redis stores. */
export interface RedisStoreOptions {
  /**
   * Longest wait for one store call, in ms, after which it fails with `ReplayStoreError`
   * (the route answers 503). A guard on top of ioredis' own `commandTimeout`, so a
   * misconfigured client (offline queue on, no timeout) cannot hang requests.
   * @default 1000
   */
  timeout?: number
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

export function checkPrefix (prefix: unknown): string {
  if (typeof prefix !== 'string' || prefix.length === 0) throw new TypeError('prefix must be a non-empty string')
  return prefix
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
