import { ReplayStoreError } from './errors.js'
import { checkClient, checkPrefix, checkReplicaWait, checkTimeout, guarded, keySlot, type RedisClientLike, type RedisStoreOptions, type ReplicaWait } from './redis-client.js'
import {
  checkFingerprint, checkQuery, encodeCursor, eventJson, retryToken, toDeadLetter,
  type DeadLetter, type DeadLetterError, type DeadLetterFailure, type DeadLetterPage, type DeadLetterQuery,
  type DeadLetterRetry, type DeadLetterStore, type RecordedFailure, type StoredLetter,
} from './dead-letters-types.js'
import { DEFAULT_CLAIM_TTL } from './claim-store.js'
import { checkTtl } from './ttl.js'

export interface RedisDeadLetterStoreOptions extends RedisStoreOptions {
  /**
   * Key prefix. It must hold a `{hash tag}`: every key of the store then lives in one Redis
   * Cluster slot, so each operation is one atomic script.
   * @default '{mailchannels-webhooks:dead-letters}:'
   */
  prefix?: string
  /**
   * How long the failed attempts of an event not (yet) parked are remembered after its last
   * failure, in seconds. Parked events are kept until retried or discarded.
   * @default 259200 (seconds: 3 days)
   */
  ttl?: number
}

// Layout: a hash per event, `<prefix>e:<fingerprint>` (its failed attempts, last error, the event's
// JSON, and once parked `parked` '1' and `parkedAt`), expiring `ttl` after the last failure until it
// is parked; and `<prefix>parked`, a sorted set of the parked fingerprints scored by `parkedAt` (ms),
// which `list` walks newest first. One hash tag: every script touches one slot.

const RECORD = `local k = KEYS[1]
local parked = redis.call('HGET', k, 'parked')
if not parked then
  redis.call('HSET', k, 'fingerprint', ARGV[1], 'type', ARGV[2], 'event', ARGV[3], 'attempts', 0, 'firstFailedAt', ARGV[7], 'parked', '0', 'source', ARGV[9])
end
local attempts = redis.call('HINCRBY', k, 'attempts', 1)
redis.call('HSET', k, 'lastFailedAt', ARGV[7], 'errorName', ARGV[4], 'errorMessage', ARGV[5])
if parked == '1' then return {attempts, 1} end
if attempts >= tonumber(ARGV[6]) then
  redis.call('HSET', k, 'parked', '1', 'parkedAt', ARGV[7])
  redis.call('PERSIST', k)
  redis.call('ZADD', KEYS[2], ARGV[7], ARGV[1])
  return {attempts, 1}
end
redis.call('PEXPIRE', k, ARGV[8])
return {attempts, 0}`

const CLEAR = `for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'parked') == '0' then redis.call('DEL', KEYS[i]) end
end
return 1`

const GET = `if redis.call('HGET', KEYS[1], 'parked') ~= '1' then return false end
return redis.call('HGETALL', KEYS[1])`

const DISCARD = `if redis.call('HGET', KEYS[1], 'parked') ~= '1' then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1`

const REQUEST = `if redis.call('HGET', KEYS[1], 'parked') ~= '1' then return 0 end
redis.call('HSET', KEYS[1], 'retryRequestedAt', ARGV[1])
return 1`

const CLAIM_RETRY = `if redis.call('HGET', KEYS[1], 'parked') ~= '1' then return 'missing' end
local token = redis.call('HGET', KEYS[1], 'retryToken')
local untilMs = tonumber(redis.call('HGET', KEYS[1], 'retryUntil') or '0')
if token and untilMs > tonumber(ARGV[1]) then return 'busy' end
redis.call('HSET', KEYS[1], 'retryToken', ARGV[2], 'retryUntil', ARGV[1] + ARGV[3])
return redis.call('HGETALL', KEYS[1])`

const RESOLVE_RETRY = `if redis.call('HGET', KEYS[1], 'retryToken') ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1`

const FAIL_RETRY = `if redis.call('HGET', KEYS[1], 'retryToken') ~= ARGV[2] then return 0 end
redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSET', KEYS[1], 'lastFailedAt', ARGV[3], 'parkedAt', ARGV[3], 'errorName', ARGV[4], 'errorMessage', ARGV[5])
redis.call('HDEL', KEYS[1], 'retryToken', 'retryUntil', 'retryRequestedAt')
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1`

// Walks the parked set newest first from ARGV[1] (max score) down to ARGV[2] (min), skipping the
// cursor's position and what the filters exclude, until ARGV[3] + 1 matches (one more than a page:
// whether there is a next page). ARGV[4] type ('' any), ARGV[5] '1' retry requested only,
// ARGV[6]/ARGV[7] the cursor's score and fingerprint ('' none), ARGV[8] the entry key prefix.
const LIST = `local want = tonumber(ARGV[3]) + 1
local out = {}
local offset = 0
while #out < want do
  local batch = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES', 'LIMIT', offset, 200)
  if #batch == 0 then break end
  offset = offset + #batch / 2
  for i = 1, #batch, 2 do
    local fp = batch[i]
    local skip = ARGV[6] ~= '' and tonumber(batch[i + 1]) == tonumber(ARGV[6]) and fp >= ARGV[7]
    if not skip then
      local h = redis.call('HGETALL', ARGV[8] .. fp)
      local fields = {}
      for j = 1, #h, 2 do fields[h[j]] = h[j + 1] end
      if fields['parked'] == '1' and (ARGV[4] == '' or fields['type'] == ARGV[4]) and (ARGV[5] ~= '1' or fields['retryRequestedAt']) then
        out[#out + 1] = h
        if #out >= want then break end
      end
    end
  end
end
return out`

/**
 * Dead letters on one Redis or a Redis Cluster, shared by every instance (pair it with
 * `RedisClaimStore`). Every key holds the prefix's hash tag, so each operation is one atomic
 * script on one node. With `waitForReplicas`, parking (and every other write) waits for that many
 * replicas, as the seen-events store's done marks do. Failures reject with `ReplayStoreError`.
 */
export class RedisDeadLetterStore implements DeadLetterStore {
  readonly #client: RedisClientLike
  readonly #prefix: string
  readonly #ttlMs: number
  readonly #timeout: number
  readonly #wait: ReplicaWait | null

  constructor (client: RedisClientLike, options: RedisDeadLetterStoreOptions = {}) {
    checkClient(client, 'RedisDeadLetterStore')
    this.#client = client
    if (options === null || typeof options !== 'object') throw new TypeError('RedisDeadLetterStore options must be an object')
    const prefix = checkPrefix(options.prefix ?? '{mailchannels-webhooks:dead-letters}:')
    if (keySlot(prefix + 'e:a') !== keySlot(prefix + 'parked') || !/\{[^}]+\}/.test(prefix)) {
      throw new TypeError('prefix must hold a {hash tag} (e.g. \'{my-app:dead-letters}:\'), so every key of the store is in one Redis Cluster slot')
    }
    this.#prefix = prefix
    const ttl = options.ttl ?? DEFAULT_CLAIM_TTL
    checkTtl(ttl, 'ttl')
    this.#ttlMs = ttl * 1000
    this.#timeout = checkTimeout(options.timeout)
    this.#wait = checkReplicaWait(client, options, this.#timeout)
  }

  get #parked (): string { return this.#prefix + 'parked' }
  #key (fp: string): string { return this.#prefix + 'e:' + fp }

  async recordFailure (failure: DeadLetterFailure): Promise<RecordedFailure> {
    const fp = checkFingerprint(failure.fingerprint)
    const reply = await this.#run('park', RECORD, [this.#key(fp), this.#parked], [
      fp, failure.event.event, eventJson(failure.event, fp), failure.error.name, failure.error.message,
      failure.parkAfter, Date.now(), this.#ttlMs, failure.source ?? 'router',
    ], true)
    if (!Array.isArray(reply) || typeof reply[0] !== 'number') throw new ReplayStoreError('park', 'Redis answered recordFailure with an unexpected reply.')
    return { attempts: reply[0], parked: reply[1] === 1 }
  }

  async clearFailures (fingerprints: readonly string[]): Promise<void> {
    if (fingerprints.length === 0) return
    await this.#run('clear', CLEAR, fingerprints.map((fp) => this.#key(checkFingerprint(fp))), [], false)
  }

  async list (query?: DeadLetterQuery): Promise<DeadLetterPage> {
    const q = checkQuery(query)
    let max = Number.POSITIVE_INFINITY
    if (q.cursor !== undefined) max = q.cursor[0]
    if (q.before !== undefined) max = Math.min(max, q.before - 1)
    const reply = await this.#run('list', LIST, [this.#parked], [
      max === Number.POSITIVE_INFINITY ? '+inf' : max, q.after ?? '-inf', q.limit, q.type ?? '', q.requested ? '1' : '',
      q.cursor?.[0] ?? '', q.cursor?.[1] ?? '', this.#prefix + 'e:',
    ], false)
    if (!Array.isArray(reply)) throw new ReplayStoreError('list', 'Redis answered list with an unexpected reply.')
    const rows = reply.map((h) => stored(h, 'list'))
    const page = rows.slice(0, q.limit)
    const last = page[page.length - 1]
    return { items: page.map(toDeadLetter), ...(rows.length > q.limit && last !== undefined ? { next: encodeCursor(last.parkedAt, last.fingerprint) } : {}) }
  }

  async get (fingerprint: string): Promise<DeadLetter | undefined> {
    const reply = await this.#run('get', GET, [this.#key(checkFingerprint(fingerprint))], [], false)
    return reply === null || reply === undefined ? undefined : toDeadLetter(stored(reply, 'get'))
  }

  async discard (fingerprint: string): Promise<boolean> {
    const fp = checkFingerprint(fingerprint)
    return await this.#run('discard', DISCARD, [this.#key(fp), this.#parked], [fp], true) === 1
  }

  async requestRetry (fingerprint: string): Promise<boolean> {
    return await this.#run('request', REQUEST, [this.#key(checkFingerprint(fingerprint))], [Date.now()], true) === 1
  }

  async claimRetry (fingerprint: string, lifetimeSeconds: number): Promise<DeadLetterRetry | 'missing' | 'busy'> {
    checkTtl(lifetimeSeconds, 'lifetimeSeconds')
    const fp = checkFingerprint(fingerprint)
    const token = retryToken()
    const reply = await this.#run('retry', CLAIM_RETRY, [this.#key(fp)], [Date.now(), token, lifetimeSeconds * 1000], true)
    if (reply === 'missing' || reply === 'busy') return reply
    return { fingerprint: fp, token, letter: toDeadLetter(stored(reply, 'retry')) }
  }

  async resolveRetry (retry: DeadLetterRetry): Promise<void> {
    await this.#run('retry', RESOLVE_RETRY, [this.#key(retry.fingerprint), this.#parked], [retry.fingerprint, retry.token], true)
  }

  async failRetry (retry: DeadLetterRetry, error: DeadLetterError): Promise<void> {
    await this.#run('park', FAIL_RETRY, [this.#key(retry.fingerprint), this.#parked], [retry.fingerprint, retry.token, Date.now(), error.name, error.message], true)
  }

  /** One script on the keys' node; a `durable` write then waits for `waitForReplicas` on the same connection. */
  async #run (operation: string, script: string, keys: string[], args: Array<string | number>, durable: boolean): Promise<unknown> {
    const client = this.#client
    const wait = durable ? this.#wait : null
    return await guarded(operation, this.#timeout, async () => {
      if (wait === null) return await client.eval(script, keys.length, ...keys, ...args)
      const pipeline = client.pipeline!()
      pipeline.eval(script, keys.length, ...keys, ...args)
      pipeline.wait(wait.count, wait.timeout)
      const replies = await pipeline.exec()
      if (replies === null || replies.length !== 2) throw new ReplayStoreError(operation, 'Redis answered with an unexpected reply.')
      const [[scriptError, result], [waitError, acked]] = replies as [[Error | null, unknown], [Error | null, unknown]]
      if (scriptError !== null) throw scriptError
      if (waitError !== null) throw waitError
      if (typeof acked !== 'number' || acked < wait.count) {
        throw new ReplayStoreError(operation, `Only ${String(acked)} of ${wait.count} replicas acknowledged the dead letter within ${wait.timeout} ms.`)
      }
      return result
    })
  }
}

/** A hash read back (HGETALL's flat array) as a stored letter. */
function stored (reply: unknown, operation: string): StoredLetter {
  if (!Array.isArray(reply) || reply.length % 2 !== 0) throw new ReplayStoreError(operation, 'Redis answered with an unexpected reply.')
  const h: Record<string, string> = {}
  for (let i = 0; i < reply.length; i += 2) h[String(reply[i])] = String(reply[i + 1])
  if (typeof h.fingerprint !== 'string' || typeof h.event !== 'string') throw new ReplayStoreError(operation, 'Redis holds a malformed dead letter.')
  return {
    fingerprint: h.fingerprint,
    type: h.type ?? '',
    event: h.event,
    attempts: Number(h.attempts),
    firstFailedAt: Number(h.firstFailedAt),
    lastFailedAt: Number(h.lastFailedAt),
    parkedAt: Number(h.parkedAt),
    errorName: h.errorName ?? '',
    errorMessage: h.errorMessage ?? '',
    retryRequestedAt: h.retryRequestedAt === undefined ? null : Number(h.retryRequestedAt),
    source: h.source ?? 'router',
  }
}
