import { base64url } from '#crypto'
import { LRUCache } from 'lru-cache'
import type { ClaimState, ReplayStore } from './types.js'
import { ReplayStoreError } from './errors.js'
import { checkTtl } from './ttl.js'
import { LuaScript, assertConnected, checkClient, checkPrefix, checkReplicaWait, checkTimeout, guarded, runScript, type RedisClientLike, type RedisStoreOptions, type ReplicaWait } from './redis-client.js'

export interface RedisReplayStoreOptions extends RedisStoreOptions {
  /**
   * Key prefix. Give each deployment (endpoint) its own, so two endpoints sharing one
   * Redis never answer each other's deliveries as duplicates.
   * @default 'mailchannels-webhooks:replay:'
   */
  prefix?: string
}

// Values: 'done'; 'processing:<token>|<tombstones>' (a claim); 'cancelled|<tombstones>', where
// <tombstones> is ',' or ',t1,t2,': the tokens of claims that timed out and must never take effect.

// Claims unless the key is taken; a cancelled claim (its token among the tombstones) does nothing.
const CLAIM = new LuaScript(`local v = redis.call('GET', KEYS[1])
local tombs = ','
if v then
  if v == 'done' then return 'done' end
  if string.sub(v, 1, 10) == 'processing' then return 'processing' end
  if string.sub(v, 1, 10) ~= 'cancelled|' then return v end
  tombs = string.sub(v, 11)
  if string.find(tombs, ',' .. ARGV[2] .. ',', 1, true) then return 'cancelled' end
end
redis.call('SET', KEYS[1], 'processing:' .. ARGV[2] .. '|' .. tombs, 'EX', ARGV[1])
return 'claimed'`)

// Plain SET EX (not XX): the delivery is recorded as done even if its claim already expired.
const COMPLETE = new LuaScript(`return redis.call('SET', KEYS[1], 'done', 'EX', ARGV[1])`)

// Gives up this token's claim only (a completed delivery, or another request's claim, stay).
const RELEASE = new LuaScript(`local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local head = 'processing:' .. ARGV[1] .. '|'
if string.sub(v, 1, #head) ~= head then return 0 end
local tombs = string.sub(v, #head + 1)
if tombs == ',' then return redis.call('DEL', KEYS[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('SET', KEYS[1], 'cancelled|' .. tombs, 'PX', ttl) else redis.call('SET', KEYS[1], 'cancelled|' .. tombs) end
return 1`)

// After a claim timed out: undo it if it ran, or leave a tombstone so it never takes effect if
// it runs later (ioredis' offline queue, a frozen server). Order does not matter.
const CANCEL = new LuaScript(`local v = redis.call('GET', KEYS[1])
local tok = ARGV[2]
if not v then
  redis.call('SET', KEYS[1], 'cancelled|,' .. tok .. ',', 'EX', ARGV[1])
  return 1
end
if v == 'done' then return 0 end
local head, tombs = v, ','
local bar = string.find(v, '|', 1, true)
if bar then head, tombs = string.sub(v, 1, bar - 1), string.sub(v, bar + 1) end
local ttl = redis.call('PTTL', KEYS[1])
local function keep (value)
  if ttl > 0 then redis.call('SET', KEYS[1], value, 'PX', ttl) else redis.call('SET', KEYS[1], value, 'EX', ARGV[1]) end
end
if head == 'processing:' .. tok then
  if tombs == ',' then return redis.call('DEL', KEYS[1]) end
  keep('cancelled|' .. tombs)
  return 1
end
if string.find(tombs, ',' .. tok .. ',', 1, true) then return 0 end
tombs = tombs .. tok .. ','
while #tombs > 512 do tombs = string.sub(tombs, string.find(tombs, ',', 2, true)) end
keep(head .. '|' .. tombs)
return 1`)

/**
 * A replay store shared by every instance behind a load balancer. Claims are atomic
 * (one Lua script: set `processing` unless the key is taken), so of any number of identical
 * concurrent deliveries, on any instance, exactly one is handed to the handler.
 *
 * A claim never takes effect after it failed: it is not sent while the client is disconnected
 * (ioredis' offline queue would send it on reconnect), and a claim that timed out is cancelled
 * by its token, whether it already ran or runs later. Release and complete act on this
 * instance's own claim only.
 *
 * Pass your own ioredis client, configured to fail fast (docs/replay.md, "Multi-instance setup"):
 * `new Redis({ enableOfflineQueue: false, commandTimeout: 250, maxRetriesPerRequest: 1 })`,
 * or a `Cluster` (docs/replay.md, "Scaling out: one Redis, Redis Cluster"), on a Redis with `maxmemory-policy noeviction` or a
 * dedicated database (an evicted key is a replay let through). With replicas,
 * `waitForReplicas` keeps claims across a failover. Every failure rejects with `ReplayStoreError`.
 */
export class RedisReplayStore implements ReplayStore {
  readonly #client: RedisClientLike
  readonly #prefix: string
  readonly #timeout: number
  readonly #wait: ReplicaWait | null
  /** The token of each claim this instance holds (bounded; a forgotten token only makes release a no-op). */
  readonly #tokens = new LRUCache<string, string>({ max: 100_000, ttl: 1, ttlAutopurge: false })

  constructor (client: RedisClientLike, options: RedisReplayStoreOptions = {}) {
    checkClient(client, 'RedisReplayStore')
    this.#client = client
    this.#prefix = checkPrefix(options.prefix ?? 'mailchannels-webhooks:replay:')
    this.#timeout = checkTimeout(options.timeout)
    this.#wait = checkReplicaWait(client, options, this.#timeout)
  }

  /** Runs a one-key script, followed by `WAIT` with `waitForReplicas`. */
  async #run (operation: string, script: LuaScript, key: string, args: Array<string | number>, abandoned: () => boolean): Promise<unknown> {
    if (this.#wait === null) return await script.run(this.#client, [key], args, abandoned)
    const [reply] = await runScript(this.#client, operation, script, [key], () => args, this.#wait, abandoned)
    return reply
  }

  async claim (id: string, ttlSeconds: number): Promise<ClaimState> {
    checkTtl(ttlSeconds)
    assertConnected(this.#client, 'claim')
    const key = this.#prefix + id
    const token = base64url(crypto.getRandomValues(new Uint8Array(12)))
    let abandoned = false
    let reply: unknown
    try {
      reply = await guarded('claim', this.#timeout, async () => await this.#run('claim', CLAIM, key, [ttlSeconds, token], () => abandoned), () => { abandoned = true })
    } catch (err) {
      // It may have run, or may still run: make sure it never counts.
      abandoned = true
      this.#cancel(key, token, ttlSeconds, 3)
      throw err
    }
    if (reply === 'claimed') {
      this.#tokens.set(id, token, { ttl: ttlSeconds * 1000 })
      return reply
    }
    if (reply === 'processing' || reply === 'done') return reply
    // Someone else wrote this key, or the reply type changed: fail closed.
    throw new ReplayStoreError('claim', 'Redis answered claim with an unexpected reply.')
  }

  async complete (id: string, ttlSeconds: number): Promise<void> {
    checkTtl(ttlSeconds)
    this.#tokens.delete(id)
    const reply = await guarded('complete', this.#timeout, async () => await this.#run('complete', COMPLETE, this.#prefix + id, [ttlSeconds], () => false))
    if (!isOk(reply)) throw new ReplayStoreError('complete', 'Redis answered complete with an unexpected reply.')
  }

  async release (id: string): Promise<void> {
    const token = this.#tokens.get(id)
    if (token === undefined) return
    this.#tokens.delete(id)
    await guarded('release', this.#timeout, async () => await RELEASE.run(this.#client, [this.#prefix + id], [token]))
  }

  /** Cancels a failed claim, retrying a few times (1 s, 2 s, 4 s) while Redis cannot take it. */
  #cancel (key: string, token: string, ttlSeconds: number, attempts: number): void {
    CANCEL.run(this.#client, [key], [ttlSeconds, token]).catch(() => {
      if (attempts <= 1) return
      setTimeout(() => { this.#cancel(key, token, ttlSeconds, attempts - 1) }, 1000 * 2 ** (3 - attempts)).unref()
    })
  }
}

function isOk (reply: unknown): boolean {
  return reply === 'OK' || (typeof reply === 'object' && reply !== null && (reply as { ok?: unknown }).ok === 'OK')
}
