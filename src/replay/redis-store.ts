import type { ClaimState, ReplayStore } from './types.js'
import { ReplayStoreError } from './errors.js'
import { checkTtl } from './ttl.js'
import { LuaScript, checkClient, checkPrefix, checkTimeout, guarded, type RedisClientLike, type RedisStoreOptions } from './redis-client.js'

export interface RedisReplayStoreOptions extends RedisStoreOptions {
  /**
   * Key prefix. Give each deployment (endpoint) its own, so two endpoints sharing one
   * Redis never answer each other's deliveries as duplicates. Default `'mailchannels-webhooks:replay:'`.
   */
  prefix?: string
}

// SET NX and the fallback GET in one atomic step (one round trip): 'claimed', or the current state.
const CLAIM = new LuaScript(`if redis.call('SET', KEYS[1], 'processing', 'NX', 'EX', ARGV[1]) then return 'claimed' end
return redis.call('GET', KEYS[1])`)

// Plain SET EX (not XX): the delivery is recorded as done even if its claim already expired.
const COMPLETE = new LuaScript(`return redis.call('SET', KEYS[1], 'done', 'EX', ARGV[1])`)

// Only an unfinished claim is given up; a completed delivery stays done.
const RELEASE = new LuaScript(`if redis.call('GET', KEYS[1]) == 'processing' then return redis.call('DEL', KEYS[1]) end
return 0`)

/**
 * A replay store shared by every instance behind a load balancer. Claims are atomic
 * (`SET key processing NX EX ttl` in one Lua script), so of any number of identical
 * concurrent deliveries, on any instance, exactly one is handed to the handler.
 *
 * Pass your own ioredis client, configured to fail fast (README "Multi-instance setup"):
 * `new Redis({ enableOfflineQueue: false, commandTimeout: 250, maxRetriesPerRequest: 1 })`,
 * on a Redis with `maxmemory-policy noeviction` or a dedicated database (an evicted
 * key is a replay let through). Every failure rejects with `ReplayStoreError`.
 */
export class RedisReplayStore implements ReplayStore {
  readonly #client: RedisClientLike
  readonly #prefix: string
  readonly #timeout: number

  constructor (client: RedisClientLike, options: RedisReplayStoreOptions = {}) {
    checkClient(client, 'RedisReplayStore')
    this.#client = client
    this.#prefix = checkPrefix(options.prefix ?? 'mailchannels-webhooks:replay:')
    this.#timeout = checkTimeout(options.timeout)
  }

  async claim (id: string, ttlSeconds: number): Promise<ClaimState> {
    checkTtl(ttlSeconds)
    const reply = await guarded('claim', this.#timeout, async () => await CLAIM.run(this.#client, [this.#prefix + id], [ttlSeconds]))
    if (reply === 'claimed' || reply === 'processing' || reply === 'done') return reply
    // Someone else wrote this key, or the reply type changed: fail closed.
    throw new ReplayStoreError('claim', 'Redis answered claim with an unexpected reply.')
  }

  async complete (id: string, ttlSeconds: number): Promise<void> {
    checkTtl(ttlSeconds)
    const reply = await guarded('complete', this.#timeout, async () => await COMPLETE.run(this.#client, [this.#prefix + id], [ttlSeconds]))
    if (!isOk(reply)) throw new ReplayStoreError('complete', 'Redis answered complete with an unexpected reply.')
  }

  async release (id: string): Promise<void> {
    await guarded('release', this.#timeout, async () => await RELEASE.run(this.#client, [this.#prefix + id], []))
  }
}

function isOk (reply: unknown): boolean {
  return reply === 'OK' || (typeof reply === 'object' && reply !== null && (reply as { ok?: unknown }).ok === 'OK')
}
