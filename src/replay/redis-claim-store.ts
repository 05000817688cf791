import { checkTtl } from './ttl.js'
import { KeyOperation, assertConnected, checkClient, checkPrefix, checkReplicaWait, checkTimeout, guarded, isSingleRedis, runMultiKey, runScript, type RedisClientLike, type RedisStoreOptions, type ReplicaWait } from './redis-client.js'
import { ReplayStoreError } from './errors.js'
import { DEFAULT_CLAIM_TTL, claimTokens, type StoreClaim, type StoreClaimResult, type ClaimStore, type ClaimStoreOptions } from './claim-store.js'

export interface RedisClaimStoreOptions extends ClaimStoreOptions, RedisStoreOptions {
  /**
   * Key prefix. Give each deployment (endpoint) its own, so two endpoints sharing one Redis never
   * answer each other's events or deliveries as handled.
   * @default 'mailchannels-webhooks:seen:'
   */
  prefix?: string
}

// Layout: one key per claimed key (an event's fingerprint, a delivery's claim key: a Redis
// Cluster routes each command by its one key). Its value is the done mark '1' (the only value
// the first version wrote), or a claim 'c:<token>' with a PX lifetime. A claim is never a done
// mark, so a claim that runs late (offline queue, timeout) cannot make a key look done.
// A claim that failed is also cancelled by its token (CANCEL), so it never takes effect, even if
// it runs later: a delivery's claim lives its whole freshness window, and a late one would turn
// the sender's retry into a duplicate. Cancelled tokens are tombstones: 'c:~,t1,t2,' (no live
// claim) or 'c:<token>|,t1,t2,' (a live claim carrying them). Every value that is not a done mark
// starts with 'c:', so the first version, reading one, waits for it like a claim.
// RedisReplayStore's keys (a delivery id under its own prefix) may still hold what its previous
// version wrote: 'done', 'processing:<token>|<tombstones>' or 'cancelled|<tombstones>'; they read
// as done, processing and free, so a rolling upgrade never handles a delivery twice.
const CLAIM_PREFIX = 'c:'

// Each operation is one function of one key, run as a one-key script (a Cluster) or over a
// whole batch in one multi-key script (a single Redis): the same logic per key either way.

// Claims the key unless it holds a done mark or a live claim; a cancelled claim (its token among
// the tombstones) does nothing. The tombstones stay, at least as long as they had.
const CLAIM = new KeyOperation(`local function op (key, lifetime, claim)
  local v = redis.call('GET', key)
  if not v then
    redis.call('SET', key, claim, 'PX', lifetime)
    return 'claimed'
  end
  if v == '1' or v == 'done' then return 'done' end
  if string.sub(v, 1, 11) == 'processing:' then return 'processing' end
  local tombs = ''
  if string.sub(v, 1, 10) == 'cancelled|' then
    tombs = string.sub(v, 11)
  elseif string.sub(v, 1, 3) == 'c:~' then
    tombs = string.sub(v, 4)
  elseif string.sub(v, 1, 2) == 'c:' then
    return 'processing'
  else
    -- Not a value of this store's: answered as is, which fails the call (closed).
    return v
  end
  if string.find(tombs, ',' .. string.sub(claim, 3) .. ',', 1, true) then return 'cancelled' end
  local ttl = redis.call('PTTL', key)
  if ttl < tonumber(lifetime) then ttl = lifetime end
  redis.call('SET', key, claim .. '|' .. tombs, 'PX', ttl)
  return 'claimed'
end`, 1, 1)

// The done mark, whatever the key held (a claim that expired meanwhile is done all the same).
const MARK = new KeyOperation(`local function op (key, ttl)
  return redis.call('SET', key, '1', 'EX', ttl)
end`, 1, 0)

// 1 where this call marked the key (a live claim counts as taken, tombstones alone do not).
const ADD = new KeyOperation(`local function op (key, ttl)
  if redis.call('SET', key, '1', 'NX', 'EX', ttl) then return 1 end
  local v = redis.call('GET', key) or ''
  if string.sub(v, 1, 3) ~= 'c:~' and string.sub(v, 1, 10) ~= 'cancelled|' then return 0 end
  redis.call('SET', key, '1', 'EX', ttl)
  return 1
end`, 1, 0)

// Compare-and-delete: only this token's claim (its tombstones stay, for as long as it had).
const RELEASE = new KeyOperation(`local function op (key, claim)
  local v = redis.call('GET', key)
  if v == claim then return redis.call('DEL', key) end
  if not v or string.sub(v, 1, #claim + 1) ~= claim .. '|' then return 0 end
  local ttl = redis.call('PTTL', key)
  if ttl > 0 then redis.call('SET', key, 'c:~' .. string.sub(v, #claim + 2), 'PX', ttl) else redis.call('SET', key, 'c:~' .. string.sub(v, #claim + 2)) end
  return 1
end`, 0, 1)

// Compare-and-expire: only this token's claim.
const EXTEND = new KeyOperation(`local function op (key, lifetime, claim)
  local v = redis.call('GET', key)
  if v == claim or (v and string.sub(v, 1, #claim + 1) == claim .. '|') then return redis.call('PEXPIRE', key, lifetime) end
  return 0
end`, 1, 1)

// After a claim failed: undo it if it ran, or leave a tombstone so it never takes effect if it
// runs later (a frozen server, a timeout). Order does not matter. At most 512 characters of
// tombstones are kept (the oldest go first).
const CANCEL = new KeyOperation(`local function op (key, lifetime, claim)
  local tok = string.sub(claim, 3)
  local v = redis.call('GET', key)
  if not v then
    redis.call('SET', key, 'c:~,' .. tok .. ',', 'PX', lifetime)
    return 1
  end
  if string.sub(v, 1, 10) == 'cancelled|' then v = 'c:~' .. string.sub(v, 11) end
  if string.sub(v, 1, 2) ~= 'c:' then return 0 end
  local head, tombs = v, ','
  if string.sub(v, 3, 3) == '~' then
    head, tombs = 'c:~', string.sub(v, 4)
  else
    local bar = string.find(v, '|', 1, true)
    if bar then head, tombs = string.sub(v, 1, bar - 1), string.sub(v, bar + 1) end
  end
  local ttl = redis.call('PTTL', key)
  local function keep (value)
    if ttl > 0 then redis.call('SET', key, value, 'PX', ttl) else redis.call('SET', key, value, 'PX', lifetime) end
  end
  if head == claim then
    if tombs == ',' then return redis.call('DEL', key) end
    keep('c:~' .. tombs)
    return 1
  end
  if string.find(tombs, ',' .. tok .. ',', 1, true) then return 0 end
  tombs = tombs .. tok .. ','
  while #tombs > 512 do tombs = string.sub(tombs, string.find(tombs, ',', 2, true)) end
  if head == 'c:~' then keep('c:~' .. tombs) else keep(head .. '|' .. tombs) end
  return 1
end`, 1, 1)

/**
 * A claim store shared by every instance, on one Redis or a Redis Cluster, for events
 * (`WebhookEventRouter`'s `seenEvents`) and deliveries (the receivers' `replay`) alike: one key
 * per claimed key, so of any number of concurrent claimers, on any instance, exactly one gets a
 * key. On an ioredis `Redis` a batch is one multi-key command (one round trip). On a `Cluster`
 * (or a client of unknown kind) it is one key per command (so no command spans cluster slots),
 * the commands sent in one pipeline per node: about one round trip per node.
 *
 * A claim never takes effect after it failed: it is not sent while the client is disconnected
 * (ioredis' offline queue would send it on reconnect), and a claim that failed or timed out is
 * cancelled by its token, whether it already ran or runs later.
 *
 * Pass your own ioredis `Redis` or `Cluster`, configured to fail fast (docs/replay.md,
 * "Multi-instance setup"), on a Redis with `maxmemory-policy noeviction` or a dedicated database
 * (an evicted key is a replay let through). With replicas, `waitForReplicas` keeps claims and
 * done marks across a failover. Failures reject with `ReplayStoreError`.
 */
export class RedisClaimStore implements ClaimStore {
  readonly #client: RedisClientLike
  readonly #prefix: string
  readonly #ttl: number
  readonly #timeout: number
  readonly #wait: ReplicaWait | null
  /** A single Redis: a batch is one multi-key command. */
  readonly #multiKey: boolean

  constructor (client: RedisClientLike, options: RedisClaimStoreOptions = {}) {
    checkClient(client, 'RedisClaimStore')
    this.#client = client
    this.#prefix = checkPrefix(options.prefix ?? 'mailchannels-webhooks:seen:')
    this.#ttl = options.ttl ?? DEFAULT_CLAIM_TTL
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
      return v !== null && !v.startsWith(CLAIM_PREFIX) && !v.startsWith('processing:') && !v.startsWith('cancelled|')
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

  async claim (fingerprints: readonly string[], lifetimeSeconds: number): Promise<StoreClaimResult[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (fingerprints.length === 0) return []
    // Not queued while disconnected (ioredis' offline queue would send it on reconnect).
    assertConnected(this.#client, 'claim')
    const tokenOf = claimTokens(fingerprints.length)
    const mine: StoreClaim[] = fingerprints.map((fingerprint, i) => ({ fingerprint, token: tokenOf(i) }))
    const lifetime = lifetimeSeconds * 1000
    let replies: unknown[]
    try {
      replies = await this.#each('claim', CLAIM, fingerprints, [lifetime], (i) => [CLAIM_PREFIX + mine[i]!.token], true)
    } catch (err) {
      // Some claims may have run, or may still run: make sure none counts.
      this.#cancel(mine, lifetime, 3)
      throw err
    }
    if (!replies.every((v) => v === 'claimed' || v === 'processing' || v === 'done')) {
      // Someone else wrote these keys, or the reply type changed: fail closed.
      this.#cancel(mine, lifetime, 3)
      throw new ReplayStoreError('claim', 'Redis answered claim with an unexpected reply.')
    }
    return replies.map((v, i) => v === 'claimed' ? mine[i]! : v as 'processing' | 'done')
  }

  async complete (claims: readonly StoreClaim[], doneSeconds?: number): Promise<void> {
    if (doneSeconds !== undefined) checkTtl(doneSeconds, 'doneSeconds')
    if (claims.length === 0) return
    const replies = await this.#each('complete', MARK, claims.map((c) => c.fingerprint), [doneSeconds ?? this.#ttl], noArgs, true)
    if (!replies.every(isOk)) throw new ReplayStoreError('complete', 'Redis answered complete with an unexpected reply.')
  }

  async release (claims: readonly StoreClaim[]): Promise<void> {
    if (claims.length === 0) return
    await this.#each('release', RELEASE, claims.map((c) => c.fingerprint), [], (i) => [CLAIM_PREFIX + claims[i]!.token], false)
  }

  async extend (claims: readonly StoreClaim[], lifetimeSeconds: number): Promise<boolean[]> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    if (claims.length === 0) return []
    // Not waited for: a lost extension leaves the replicated claim with most of its lifetime, renewed again soon.
    const replies = await this.#each('extend', EXTEND, claims.map((c) => c.fingerprint), [lifetimeSeconds * 1000], (i) => [CLAIM_PREFIX + claims[i]!.token], false)
    return replies.map((v) => {
      if (v !== 0 && v !== 1) throw new ReplayStoreError('extend', 'Redis answered extend with an unexpected reply.')
      return v === 1
    })
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

  /**
   * Cancels failed claims, retrying a few times (1 s, 2 s, 4 s) while Redis cannot take it. Sent
   * as EVAL with the script's text, one command per key in the same tick: no NOSCRIPT round trip
   * on a node that never ran it, so the claims that did run are given back before the caller's
   * next call reaches the same connections.
   */
  #cancel (claims: readonly StoreClaim[], lifetime: number, attempts: number): void {
    const client = this.#client
    const source = CANCEL.perKey.source
    guarded('cancel', this.#timeout, async () => await Promise.all(claims.map(async (c) =>
      await client.eval(source, 1, this.#prefix + c.fingerprint, lifetime, CLAIM_PREFIX + c.token)))).catch(() => {
      if (attempts <= 1) return
      setTimeout(() => { this.#cancel(claims, lifetime, attempts - 1) }, 1000 * 2 ** (3 - attempts)).unref()
    })
  }
}


const noArgs = (): [] => []

function isOk (reply: unknown): boolean {
  return reply === 'OK' || (typeof reply === 'object' && reply !== null && (reply as { ok?: unknown }).ok === 'OK')
}
