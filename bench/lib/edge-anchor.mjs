// The anchor of the web verify bundle (bench/bundle-size.mjs --peers): what a competent user writes
// for a Worker without the library, with the defences of a careful hand-written 1.3 KB receiver. Only
// for measuring: it is not tested as a receiver and takes none of the library's checks beyond these.
//   - Content-Digest sha-256 over the raw body, Ed25519 over the RFC 9421 base (canonical headers only);
//   - the key fetched by keyid: a timeout, a size cap, in-flight dedupe, a bounded TTL cache, a
//     negative cache with backoff, a fetch budget per minute;
//   - freshness (`created`) and a customer_handle check on every event.
const TTL = 3_600_000
const MAX_KEYS = 100
const CAP = 16_384
const INPUT = /^([a-z*][\w.*-]*)=(\("content-digest"\);created=(\d+);alg="ed25519";keyid="([\w.~-]{1,64})")$/
const keys = new Map()
const failures = new Map()
const inFlight = new Map()
let tokens = 10
let refilledAt = Date.now()

const b64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0))
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i])

async function fetchKey (base, id) {
  const res = await fetch(`${base}/tx/v1/webhook/public-key?id=${id}`, { redirect: 'manual', signal: AbortSignal.timeout(3000) })
  if (res.status !== 200 || Number(res.headers.get('content-length')) > CAP) throw new Error('key ' + res.status)
  const text = await res.text()
  if (text.length > CAP) throw new Error('key too large') // (read whole first: a streamed cap costs a few lines more)
  const body = JSON.parse(text)
  if (body.id !== id) throw new Error('wrong key id')
  return crypto.subtle.importKey('spki', b64(body.key), 'Ed25519', false, ['verify'])
}

function key (base, id) {
  const now = Date.now()
  const hit = keys.get(id)
  if (hit !== undefined && now - hit.at < TTL) return hit.key
  const failed = failures.get(id)
  if (failed !== undefined && now < failed.until) throw new Error('key unavailable')
  let pending = inFlight.get(id)
  if (pending === undefined) {
    tokens = Math.min(10, tokens + (now - refilledAt) / 6000)
    refilledAt = now
    if (tokens < 1) throw new Error('key fetch budget spent')
    tokens--
    pending = fetchKey(base, id).then((k) => {
      keys.delete(id)
      keys.set(id, { key: k, at: Date.now() })
      if (keys.size > MAX_KEYS) keys.delete(keys.keys().next().value)
      failures.delete(id)
      return k
    }, (err) => {
      const backoff = Math.min(300_000, (failed?.backoff ?? 15_000) * 2)
      failures.set(id, { until: Date.now() + backoff, backoff })
      if (failures.size > 1000) failures.delete(failures.keys().next().value)
      throw err
    }).finally(() => inFlight.delete(id))
    inFlight.set(id, pending)
  }
  return pending
}

/** Resolves the events, or rejects. */
export async function verify (request, { customers, base = 'https://api.mailchannels.net', maxAge = 300 }) {
  const body = new Uint8Array(await request.arrayBuffer())
  const h = request.headers
  const digest = /^sha-256=:([A-Za-z0-9+/]{43}=):$/.exec(h.get('content-digest') ?? '')
  const input = INPUT.exec(h.get('signature-input') ?? '')
  const sig = /^([a-z*][\w.*-]*)=:([A-Za-z0-9+/]{86}==):$/.exec(h.get('signature') ?? '')
  if (digest === null || input === null || sig === null || sig[1] !== input[1]) throw new Error('malformed signature headers')
  if (Math.abs(Date.now() / 1000 - Number(input[3])) > maxAge) throw new Error('stale signature')
  if (!same(new Uint8Array(await crypto.subtle.digest('SHA-256', body)), b64(digest[1]))) throw new Error('digest mismatch')
  const base9421 = `"content-digest": ${h.get('content-digest')}\n"@signature-params": ${input[2]}`
  if (!await crypto.subtle.verify('Ed25519', await key(base, input[4]), b64(sig[2]), new TextEncoder().encode(base9421))) throw new Error('bad signature')
  const events = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body))
  if (!Array.isArray(events) || !events.every((e) => customers.includes(e?.customer_handle))) throw new Error('customer not allowed')
  return events
}
