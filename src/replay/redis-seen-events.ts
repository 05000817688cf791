import { checkTtl } from './ttl.js'
import { KeyOperation, assertConnected, checkClient, checkPrefix, checkReplicaWait, checkTimeout, guarded, isSingleRedis, runMultiKey, runScript, type RedisClientLike, type RedisStoreOptions, type ReplicaWait } from './redis-client.js'
import { ReplayStoreError } from './errors.js'
import { DEFAULT_SEEN_EVENTS_TTL, claimTokens, type EventClaim, type EventClaimResult, type SeenEventsStore, type SeenEventsStoreOptions } from './seen-events-types.js'

export interface RedisSeenEventsStoreOptions extends SeenEventsStoreOptions, RedisStoreOptions {
  /**
   * Key prefix.
   * @default 'mailchannels-webhooks:seen:'
   */
  prefix?: string
}

// Layout: one key per fingerprint (a Redis Cluster routes each command by its one key).
// Its value is the done mark '1' (the only value the first version wrote), or a claim
// 'c:<token>' with a short PX lifetime. A claim is never a done mark, so a claim that runs
// late (offline queue, timeout) can delay an event by its lifetime, never make it look done.
const CLAIM_PREFIX = 'c:'

// Each operation is one function of one key, run as a one-key script (a Cluster) or over a
// whole batch in one multi-key script (a single Redis): the same logic per key either way.

// Claims the key unless it holds anything (a done mark or a live claim).
const CLAIM = new KeyOperation(`local function op (key, lifetime, token)
  local v = redis.call('GET', key)
  if not v then
    redis.call('SET', key, token, 'PX', lifetime)
    return 'claimed'
  end
  if string.sub(v, 1, 2) == 'c:' then return 'processing' end
  return 'done'
end`, 1, 1)

// The done mark, whatever the key held (a claim that expired meanwhile is done all the same).
const MARK = new KeyOperation(`local function op (key, ttl)
  return redis.call('SET', key, '1', 'EX', ttl)
end`, 1, 0)

// SET NX EX: 1 where this call marked the key (a live claim counts as taken).
const ADD = new KeyOperation(`local function op (key, ttl)
  if redis.call('SET', key, '1', 'NX', 'EX', ttl) then return 1 end
  return 0
end`, 1, 0)

// Compare-and-delete: only this token's claim.
const RELEASE = new KeyOperation(`local function op (key, token)
  if redis.call('GET', key) == token then return redis.call('DEL', key) end
  return 0
end`, 0, 1)

// Compare-and-expire: only this token's claim.
const EXTEND = new KeyOperation(`local function op (key, lifetime, token)
  if redis.call('GET', key) == token then return redis.call('PEXPIRE', key, lifetime) end
  return 0
end`, 1, 1)

/**
 * A seen-events store shared by every instance, on one Redis or a Redis Cluster, one key per
 * fingerprint. On an ioredis `Redis` a batch is one multi-key command (one round trip). On a
 * `Cluster` (or a client of unknown kind) it is one key per command (so no command spans
 * cluster slots), the commands sent in one pipeline per node: about one round trip per node. Pass
 * your own ioredis `Redis` or `Cluster`, configured to fail fast as for `RedisReplayStore`.
 * With replicas, `waitForReplicas` keeps claims and done marks across a failover.
 * Failures reject with `ReplayStoreError`.
 */
export class RedisSeenEventsStore implements SeenEventsStore {
  readonly #client: RedisClientLike
  readonly #prefix: string
  readonly #ttl: number
  readonly #timeout: number
  readonly #wait: ReplicaWait | null
  /** A single Redis: a batch is one multi-key command. */
  readonly #multiKey: boolean

  constructor (client: RedisClientLike, options: RedisSeenEventsStoreOptions = {}) {
    checkClient(client, 'RedisSeenEventsStore')
    this.#client = client
    this.#prefix = checkPrefix(options.prefix ?? 'mailchannels-webhooks:seen:')
    this.#ttl = options.ttl ?? DEFAULT_SEEN_EVENTS_TTL
    checkTtl(this.#ttl, 'ttl')
    this.#timeout = checkTimeout(options.timeout)
    this.#wait = checkReplicaWait(client, options, this.#timeout)
    this.#multiKey = isSingleRedis(client)
  }

  async has (fingerprints: readonly string[]): Promise<boolean[]> {
    if (fingerprints.length === 0) return []
    const keys = fingerprints.map((fp) => this.#prefix + fp)
    const client = this.#client
    const replies: unknown = await guarded('has', this.#timeout, async () => this.#multiKey && typeof client.mget === 'function'
      ? await client.mget(...keys)
      : await Promise.all(keys.map(async (key) => await client.get(key))))
    if (!Array.isArray(replies) || replies.length !== keys.length) throw new ReplayStoreError('has', 'Redis answered has with an unexpected reply.')
    return replies.map((v) => {
      if (v !== null && typeof v !== 'string') throw new ReplayStoreError('has', 'Redis answered has with an unexpected reply.')
      return v !== null && !v.startsWith(CLAIM_PREFIX)
    })
  }

  async add (fingerprints: readonly string[]): Promise<boolean[]> {
    if (fingerprints.length === 0) return []
    // Not queued while disconnected: a late add would mark events seen that were never processed.
    assertConnected(this.#client, 'add')
    const replies = await this.#each('add', ADD, fingerprints, [this.#ttl], noArgs, true)
    return replies.map((v) => {
      if (v !== 0 && v !== 1) throw new ReplayStoreError('add', 'Redis answered add with an unexpected reply.')
      return v === 1
    })
  }

  async delete (fingerprints: readonly string[]): Promise<void> {
    if (fingerprints.length === 0) return
    const keys = fingerprints.map((fp) => this.#prefix + fp)
    await guarded('delete', this.#timeout, async () => this.#multiKey
      ? await this.#client.del(...keys)
      : await Promise.all(keys.map(async (key) => await this.#client.del(key))))
  }

  async claim (fingerprints: readonly string[], lifetimeSeconds: number): Promise<EventClaimResult[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (fingerprints.length === 0) return []
    // Not queued while disconnected; one that still runs late holds the event for its lifetime at most.
    assertConnected(this.#client, 'claim')
    const tokenOf = claimTokens(fingerprints.length)
    const mine: EventClaim[] = fingerprints.map((fingerprint, i) => ({ fingerprint, token: tokenOf(i) }))
    let replies: unknown[]
    try {
      replies = await this.#each('claim', CLAIM, fingerprints, [lifetimeSeconds * 1000], (i) => [CLAIM_PREFIX + mine[i]!.token], true)
    } catch (err) {
      // Some claims may have been taken (or may still be): give them back, best effort.
      this.#releaseQuietly(mine)
      throw err
    }
    if (!replies.every((v) => v === 'claimed' || v === 'processing' || v === 'done')) {
      this.#releaseQuietly(mine)
      throw new ReplayStoreError('claim', 'Redis answered claim with an unexpected reply.')
    }
    return replies.map((v, i) => v === 'claimed' ? mine[i]! : v as 'processing' | 'done')
  }

  async complete (claims: readonly EventClaim[]): Promise<void> {
    if (claims.length === 0) return
    const replies = await this.#each('complete', MARK, claims.map((c) => c.fingerprint), [this.#ttl], noArgs, true)
    if (!replies.every(isOk)) throw new ReplayStoreError('complete', 'Redis answered complete with an unexpected reply.')
  }

  async release (claims: readonly EventClaim[]): Promise<void> {
    if (claims.length === 0) return
    await this.#each('release', RELEASE, claims.map((c) => c.fingerprint), [], (i) => [CLAIM_PREFIX + claims[i]!.token], false)
  }

  async extend (claims: readonly EventClaim[], lifetimeSeconds: number): Promise<void> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (claims.length === 0) return
    // Not waited for: a lost extension leaves the replicated claim with most of its lifetime, renewed again soon.
    await this.#each('extend', EXTEND, claims.map((c) => c.fingerprint), [lifetimeSeconds * 1000], (i) => [CLAIM_PREFIX + claims[i]!.token], false)
  }

  /**
   * Runs `op` for every fingerprint: one multi-key script on a single Redis, else one one-key
   * script per fingerprint, all sent in the same tick. A `durable` write also waits for
   * `waitForReplicas` replicas.
   */
  async #each (operation: string, op: KeyOperation, fingerprints: readonly string[], shared: Array<string | number>, own: (i: number) => Array<string | number>, durable: boolean): Promise<unknown[]> {
    // Once the caller gave up, a NOSCRIPT is not retried with EVAL, so nothing runs late.
    let abandoned = false
    const keys = fingerprints.map((fp) => this.#prefix + fp)
    const wait = durable ? this.#wait : null
    const run = this.#multiKey
      ? async () => await runMultiKey(this.#client, operation, op, keys, shared, own, wait, () => abandoned)
      : async () => await runScript(this.#client, operation, op.perKey, keys, (i) => [...shared, ...own(i)], wait, () => abandoned)
    try {
      return await guarded(operation, this.#timeout, run, () => { abandoned = true })
    } catch (err) {
      abandoned = true
      throw err
    }
  }

  #releaseQuietly (claims: EventClaim[]): void {
    this.release(claims).catch(() => {})
  }
}

const noArgs = (): [] => []

function isOk (reply: unknown): boolean {
  return reply === 'OK' || (typeof reply === 'object' && reply !== null && (reply as { ok?: unknown }).ok === 'OK')
}
