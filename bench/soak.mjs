// `npm run soak`: a bounded load run against the Fastify plugin, loopback only.
//
//   node bench/soak.mjs [--seconds 60] [--warmup 5] [--concurrency 16]   (env SOAK_SECONDS also works)
//
// The same mix runs for --warmup seconds first (JIT, thread pool, allocator arenas, socket
// buffers); "RSS at start" is taken after it, so RSS growth measures what the load keeps.
// The RSS before any traffic is printed too. Every request of both phases is checked.
//
// A child process runs the receiver (bench/soak/server.mjs); this process runs the fake
// MailChannels key API (knows "mckey", 404 for any other id, counts fetches) and drives a
// mix of valid deliveries, tampered bodies, random-keyid floods, oversize bodies, slow
// (trickled) bodies and malformed headers. It prints throughput, latency, rejections by
// reason, key fetches, RSS, then PASS/FAIL lines; the exit code is 0 only if all pass.
import { fork } from 'node:child_process'
import crypto from 'node:crypto'
import http from 'node:http'
import net from 'node:net'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { generateSigningKeyPair } from '../dist/testing/index.js'

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: process.env.SOAK_SECONDS ?? '60' },
    warmup: { type: 'string', default: '5' },
    concurrency: { type: 'string', default: '16' },
  },
})
const SECONDS = Number(args.seconds)
const WARMUP = Number(args.warmup)
const CONCURRENCY = Number(args.concurrency)
if (!(SECONDS > 0) || !(WARMUP >= 0) || !Number.isInteger(CONCURRENCY) || CONCURRENCY < 1) {
  console.error('usage: node bench/soak.mjs [--seconds N] [--warmup N] [--concurrency N]')
  process.exit(2)
}

// Budget of the plugin's KeyStore with its defaults: a token bucket of 10 fetches, refilled
// at 10 per minute, so over T seconds at most 10 + 10 * T / 60 fetches can be sent.
const FETCH_BUDGET_PER_MIN = 10
const BODY_LIMIT = 1024 * 1024
const RSS_GROWTH_LIMIT = 50 * 1024 * 1024
const SLOW_LANE = 3 // concurrent trickled bodies
const REQUEST_TIMEOUT_MS = 5_000 // the server's requestTimeout (bench/soak/server.mjs)
const CLIENT_TIMEOUT_MS = 15_000 // a request with no answer after this is a hang

let driverUnhandled = 0
process.on('unhandledRejection', (reason) => {
  driverUnhandled++
  console.error('driver unhandledRejection:', reason)
})

// --- the fake key API ---------------------------------------------------------------
const keys = generateSigningKeyPair()
let keyFetches = 0
const keyServer = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://127.0.0.1')
  if (url.pathname === '/tx/v1/webhook/public-key') keyFetches++
  const id = url.searchParams.get('id')
  if (url.pathname === '/tx/v1/webhook/public-key' && id === 'mckey') {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ id, key: keys.publicKey }))
    return
  }
  res.writeHead(404, { 'content-type': 'application/json' })
  res.end('{"errors":["not found"]}')
})
await new Promise((resolve) => keyServer.listen(0, '127.0.0.1', resolve))
const keyBaseUrl = `http://127.0.0.1:${keyServer.address().port}`

// --- the receiver, in a child process -----------------------------------------------
const child = fork(fileURLToPath(new URL('./soak/server.mjs', import.meta.url)), [keyBaseUrl], {
  execArgv: ['--expose-gc'],
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
})
let childExited = null
child.on('exit', (code, signal) => { childExited = { code, signal } })
const pending = new Map()
let msgId = 0
child.on('message', (msg) => {
  if (msg?.type === 'log') console.error(msg.line)
  else if (msg?.type === 'stats' && pending.has(msg.id)) {
    pending.get(msg.id)(msg)
    pending.delete(msg.id)
  }
})
const port = await new Promise((resolve, reject) => {
  child.once('message', (msg) => (msg?.type === 'ready' ? resolve(msg.port) : reject(new Error('unexpected message'))))
  child.once('exit', () => reject(new Error('the soak server exited during start-up')))
})
function serverStats (gc = false) {
  const id = ++msgId
  return new Promise((resolve) => {
    pending.set(id, resolve)
    child.send({ type: 'stats', id, gc })
  })
}

// --- deliveries ---------------------------------------------------------------------
let seq = 0
const nowS = () => Math.floor(Date.now() / 1000)
const digestOf = (body, alg = 'sha256', name = 'sha-256') => `${name}=:${crypto.hash(alg, body, 'base64')}:`

/** Signs params (sent verbatim, already canonical) over body + Content-Digest, as MailChannels does. */
function signed ({ body, params, contentDigest = digestOf(body), label = 'sig_1', signature }) {
  const base = `"content-digest": ${contentDigest}\n"@signature-params": ${params}`
  const sig = signature ?? crypto.sign(null, Buffer.from(base, 'latin1'), keys.privateKey)
  return {
    body,
    headers: {
      'content-type': 'application/json',
      'content-digest': contentDigest,
      'signature-input': `${label}=${params}`,
      signature: `${label}=:${sig.toString('base64')}:`,
    },
  }
}
const P = (created = nowS(), keyId = 'mckey', alg = '"ed25519"') => `("content-digest");created=${created};alg=${alg};keyid="${keyId}"`
/** A unique body each time, so no valid delivery is a replay of another. */
const freshBody = (handle = 'acct_1') => Buffer.from(JSON.stringify([{
  email: 's@example.com', customer_handle: handle, timestamp: nowS(), event: 'delivered', request_id: `soak_${process.pid}_${++seq}`,
}]))

const OVERSIZE = Buffer.alloc(BODY_LIMIT + 1, 0x20)

/** Malformed-header cases: [name, build, expected status, expected code]. */
const MALFORMED = [
  ['no Signature header', () => { const d = signed({ body: freshBody(), params: P() }); delete d.headers.signature; return d }, 400, 'missing_header'],
  ['two Signature-Input members', () => {
    const d = signed({ body: freshBody(), params: P() })
    d.headers['signature-input'] += `, sig_2=${P(nowS(), 'k2')}`
    d.headers.signature += `, sig_2=:${Buffer.alloc(64).toString('base64')}:`
    return d
  }, 400, 'malformed_header'],
  ['created as a String', () => {
    const d = signed({ body: freshBody(), params: P() })
    d.headers['signature-input'] = d.headers['signature-input'].replace(/created=(\d+)/, 'created="$1"')
    return d
  }, 400, 'malformed_header'],
  ['label mismatch', () => { const d = signed({ body: freshBody(), params: P() }); d.headers.signature = d.headers.signature.replace('sig_1', 'sig_2'); return d }, 400, 'malformed_header'],
  ['alg hmac-sha256 (re-signed)', () => signed({ body: freshBody(), params: P(nowS(), 'mckey', '"hmac-sha256"') }), 401, 'unsupported_algorithm'],
  ['md5 Content-Digest (re-signed)', () => { const body = freshBody(); return signed({ body, params: P(), contentDigest: digestOf(body, 'md5', 'md5') }) }, 401, 'unsupported_algorithm'],
  ['created an hour ago (re-signed)', () => signed({ body: freshBody(), params: P(nowS() - 3600) }), 401, 'signature_expired'],
  ['other customer (validly signed)', () => signed({ body: freshBody('acct_other'), params: P() }), 403, 'customer_not_allowed'],
  // Any media type is accepted (the signature protects the bytes); a compressed body is not.
  ['Content-Encoding gzip', () => { const d = signed({ body: freshBody(), params: P() }); d.headers['content-encoding'] = 'gzip'; return d }, 415, 'unsupported_media_type'],
]

const KINDS = [
  // kind, weight, build -> { delivery, expect: { status: [..], codes: [..] } }
  ['valid', 60, () => ({ d: signed({ body: freshBody(), params: P() }), status: [200], codes: [null] })],
  ['tampered', 15, () => {
    const d = signed({ body: freshBody(), params: P() })
    const i = crypto.randomInt(d.body.length)
    d.body[i] ^= 1 + crypto.randomInt(255)
    return { d, status: [401], codes: ['digest_mismatch'] }
  }],
  ['keyid-flood', 10, () => {
    const body = freshBody()
    const d = signed({ body, params: P(nowS(), `k${crypto.randomBytes(8).toString('hex')}`), signature: Buffer.alloc(64) })
    // 404 from the key API (401 unknown_key), or the fetch budget is spent (503 key_unavailable).
    return { d, status: [401, 503], codes: ['unknown_key', 'key_unavailable'] }
  }],
  ['oversize', 5, () => ({ d: { body: OVERSIZE, headers: { ...signed({ body: OVERSIZE, params: P() }).headers } }, status: [413], codes: ['payload_too_large'], ownAgent: true })],
  ['malformed', 5, () => {
    const [name, build, status, code] = MALFORMED[crypto.randomInt(MALFORMED.length)]
    return { d: build(), status: [status], codes: [code], label: name }
  }],
]
const TOTAL_WEIGHT = KINDS.reduce((s, k) => s + k[1], 0)
function pickKind () {
  let r = crypto.randomInt(TOTAL_WEIGHT)
  for (const k of KINDS) if ((r -= k[1]) < 0) return k
  return KINDS[0]
}

// --- stats --------------------------------------------------------------------------
const stats = {
  byKind: new Map(), // kind -> { sent, ok, wrong }
  reasons: new Map(), // code -> count
  latenciesValid: [],
  validRejected: 0,
  invalidAccepted: 0,
  wrongReason: new Map(), // "kind: expected -> got" -> count
  hangs: 0,
  transportErrors: new Map(),
  completed: 0,
  measured: 0, // requests completed in the measured phase (throughput)
}
let measuring = false
const kindStats = (k) => {
  let s = stats.byKind.get(k)
  if (s === undefined) stats.byKind.set(k, (s = { sent: 0, ok: 0, wrong: 0 }))
  return s
}
const bump = (map, key) => map.set(key, (map.get(key) ?? 0) + 1)

const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY })

function send (d, ownAgent) {
  return new Promise((resolve) => {
    const t0 = process.hrtime.bigint()
    let done = false
    const finish = (r) => { if (!done) { done = true; resolve({ ...r, ms: Number(process.hrtime.bigint() - t0) / 1e6 }) } }
    const req = http.request({
      host: '127.0.0.1', port, method: 'POST', path: '/webhooks',
      agent: ownAgent ? false : agent,
      headers: { ...d.headers, 'content-length': String(d.body.length) },
      timeout: CLIENT_TIMEOUT_MS,
    }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => {
        let body = null
        try { body = JSON.parse(Buffer.concat(chunks).toString('utf8')) } catch {}
        finish({ status: res.statusCode, body })
      })
      res.on('error', () => finish({ status: res.statusCode, body: null }))
    })
    req.on('timeout', () => { req.destroy(new Error('client timeout')); finish({ error: 'hang' }) })
    // The server may answer 413 and close before the whole oversize body is written.
    req.on('error', (err) => finish({ error: err.code ?? err.message }))
    req.end(d.body)
  })
}

function record (kind, expect, r) {
  const ks = kindStats(kind)
  ks.sent++
  stats.completed++
  if (measuring) stats.measured++
  if (r.error !== undefined) {
    if (r.error === 'hang') stats.hangs++
    bump(stats.transportErrors, `${kind}: ${r.error}`)
    if (kind === 'valid') stats.validRejected++
    else ks.ok++ // the connection was refused or reset: not accepted
    return
  }
  const code = r.status === 200 ? null : (r.body?.code ?? `HTTP ${r.status}`)
  if (code !== null) bump(stats.reasons, code)
  if (kind === 'valid') {
    if (measuring) stats.latenciesValid.push(r.ms)
    if (r.status !== 200 || r.body?.received !== 1) {
      stats.validRejected++
      bump(stats.wrongReason, `valid: expected 200 -> got ${r.status} ${r.body?.code ?? (r.body?.duplicate ? 'duplicate' : '')}`)
      ks.wrong++
      return
    }
  } else if (r.status >= 200 && r.status < 300) {
    stats.invalidAccepted++
    bump(stats.wrongReason, `${expect.label ?? kind}: accepted with ${r.status}`)
    ks.wrong++
    return
  }
  if (expect.status.includes(r.status) && expect.codes.includes(code)) ks.ok++
  else {
    ks.wrong++
    bump(stats.wrongReason, `${expect.label ?? kind}: expected ${expect.status.join('|')} ${expect.codes.join('|')} -> got ${r.status} ${code}`)
  }
}

/** A body trickled at 1 byte/s with Content-Length 1000: the server must cut it off (408). */
function slowBody () {
  return new Promise((resolve) => {
    const d = signed({ body: freshBody(), params: P() })
    const t0 = Date.now()
    const socket = net.connect(port, '127.0.0.1')
    let response = ''
    let timer = null
    const end = (outcome) => {
      clearInterval(timer)
      socket.destroy()
      resolve({ ...outcome, ms: Date.now() - t0 })
    }
    socket.setTimeout(CLIENT_TIMEOUT_MS, () => end({ status: null, hang: true }))
    socket.on('connect', () => {
      const head = Object.entries({ ...d.headers, host: `127.0.0.1:${port}`, 'content-length': '1000' })
        .map(([k, v]) => `${k}: ${v}`).join('\r\n')
      socket.write(`POST /webhooks HTTP/1.1\r\n${head}\r\n\r\n`)
      let sent = 0
      timer = setInterval(() => {
        if (sent < 1000 && socket.writable) { socket.write(d.body.subarray(sent % d.body.length, (sent % d.body.length) + 1)); sent++ }
      }, 1000)
    })
    socket.on('data', (c) => { response += c.toString('latin1') })
    socket.on('error', () => {})
    socket.on('close', () => {
      const m = /^HTTP\/1\.1 (\d{3})/.exec(response)
      end({ status: m ? Number(m[1]) : null })
    })
  })
}

// --- run ------------------------------------------------------------------------------
const idle = await serverStats(true)
const tIdle = Date.now()
const fetchesAtStart = keyFetches
console.log(`soak: ${SECONDS} s after a ${WARMUP} s warm-up, concurrency ${CONCURRENCY} (+${SLOW_LANE} slow-body lane), receiver pid ${child.pid} on 127.0.0.1:${port}, key API ${keyBaseUrl}`)
console.log('soak: replay protection on (plugin default MemoryReplayStore); every valid delivery has a unique body and a fresh created, so none is a replay')

// First one valid delivery, so "mckey" is cached before the flood starts spending the budget.
{
  const w = KINDS[0][2]()
  record('valid', w, await send(w.d))
}

let deadline = Date.now() + WARMUP * 1000
async function worker () {
  while (Date.now() < deadline && childExited === null) {
    const [kind, , build] = pickKind()
    const e = build()
    record(kind, e, await send(e.d, e.ownAgent === true))
  }
}
const slow = { sent: 0, cut408: 0, otherClose: 0, hangs: 0, cutMs: [] }
async function slowLane () {
  // Stop starting trickles when one could not finish before the deadline.
  while (Date.now() + REQUEST_TIMEOUT_MS + 2_000 < deadline && childExited === null) {
    const r = await slowBody()
    slow.sent++
    stats.completed++
    if (measuring) stats.measured++
    if (r.hang) slow.hangs++
    else if (r.status === 408) { slow.cut408++; slow.cutMs.push(r.ms) } else slow.otherClose++
    if (r.status !== null) bump(stats.reasons, r.status === 408 ? 'HTTP 408 (request timeout)' : `HTTP ${r.status}`)
  }
}
// Warm-up: the same mix (no slow bodies), checked like the rest.
await Promise.all(Array.from({ length: CONCURRENCY }, worker))
const start = await serverStats(true)

measuring = true
const t0 = Date.now()
deadline = t0 + SECONDS * 1000
const mid = []
const sampler = setInterval(async () => { mid.push((await serverStats()).rss) }, 5_000)
await Promise.all([...Array.from({ length: CONCURRENCY }, worker), ...Array.from({ length: SLOW_LANE }, slowLane)])
clearInterval(sampler)
measuring = false
const elapsed = (Date.now() - t0) / 1000
const sinceIdle = (Date.now() - tIdle) / 1000

// One more valid delivery after the load: the receiver still serves.
const after = KINDS[0][2]()
const afterResult = await send(after.d)
const stillServing = afterResult.status === 200 && afterResult.body?.received === 1
await new Promise((resolve) => setTimeout(resolve, 200))
const end = await serverStats(true)

// --- report ---------------------------------------------------------------------------
const mb = (b) => `${(b / 1024 / 1024).toFixed(1)} MB`
const pct = (xs, p) => {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}
const fetches = keyFetches - fetchesAtStart
// The key store starts full at idle, so the bound runs over warm-up + measured time.
const fetchBound = FETCH_BUDGET_PER_MIN + Math.floor((FETCH_BUDGET_PER_MIN * sinceIdle) / 60)
const valid = kindStats('valid')
const invalidSent = [...stats.byKind].filter(([k]) => k !== 'valid').reduce((s, [, v]) => s + v.sent, 0) + slow.sent
const rssGrowth = end.rss - start.rss

console.log('')
console.log(`duration       ${elapsed.toFixed(1)} s measured (+${WARMUP} s warm-up), ${stats.measured} requests, ${(stats.measured / elapsed).toFixed(0)} req/s (valid: ${(stats.latenciesValid.length / elapsed).toFixed(0)}/s); ${stats.completed} requests in all`)
console.log(`latency valid  p50 ${pct(stats.latenciesValid, 50).toFixed(2)} ms, p99 ${pct(stats.latenciesValid, 99).toFixed(2)} ms, max ${pct(stats.latenciesValid, 100).toFixed(2)} ms (client-side, concurrency ${CONCURRENCY})`)
console.log('mix            ' + [...stats.byKind].map(([k, v]) => `${k} ${v.sent}`).join(', ') + `, slow-body ${slow.sent}`)
console.log('rejections     ' + [...stats.reasons].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v}`).join(', '))
console.log(`slow bodies    ${slow.sent} trickled: ${slow.cut408} cut off with 408 (median after ${pct(slow.cutMs, 50)} ms, max ${pct(slow.cutMs, 100)} ms), ${slow.otherClose} closed otherwise, ${slow.hangs} hung`)
if (stats.transportErrors.size > 0) console.log('transport      ' + [...stats.transportErrors].map(([k, v]) => `${k} ${v}`).join(', '))
if (stats.wrongReason.size > 0) console.log('unexpected     ' + [...stats.wrongReason].map(([k, v]) => `${k} x${v}`).join('; '))
console.log(`key fetches    ${fetches} (bound ${fetchBound} = ${FETCH_BUDGET_PER_MIN} + ${FETCH_BUDGET_PER_MIN}/min x ${sinceIdle.toFixed(0)} s; ${kindStats('keyid-flood').sent} random-keyid requests)`)
console.log(`server RSS     start ${mb(start.rss)} (after warm-up; ${mb(idle.rss)} before any traffic), end ${mb(end.rss)}, peak ${mb(end.peakRss)} (start and end after GC); every 5 s: ${mid.map(mb).join(' ')}`)
console.log(`server heap    ${mb(idle.heapUsed)} idle, ${mb(start.heapUsed)} start, ${mb(end.heapUsed)} end (the replay store holds every valid delivery for maxAge + clockSkew + 1 = 361 s, up to 100,000)`)
console.log(`handler        ran ${end.handled} times for ${end.events} events`)
console.log('')

const checks = [
  [valid.sent > 0 && stats.validRejected === 0 && valid.wrong === 0, `no valid delivery rejected (${valid.sent - stats.validRejected - valid.wrong}/${valid.sent} accepted)`],
  [stats.invalidAccepted === 0 && slow.sent >= 0, `every invalid delivery rejected (${invalidSent} invalid sent, ${stats.invalidAccepted} accepted)`],
  [stats.wrongReason.size === 0 && slow.otherClose === 0, `every rejection has the expected status and code (${[...stats.wrongReason.values()].reduce((a, b) => a + b, 0) + slow.otherClose} unexpected)`],
  [slow.hangs === 0 && stats.hangs === 0 && (slow.sent === 0 || slow.cut408 === slow.sent), `no request hangs; every slow body cut off with 408 (${slow.cut408}/${slow.sent})`],
  [fetches <= fetchBound, `key fetches within budget (${fetches} <= ${fetchBound})`],
  [rssGrowth < RSS_GROWTH_LIMIT, `RSS growth under 50 MB (${mb(rssGrowth)} from start to end; ${mb(end.rss - idle.rss)} since before any traffic)`],
  [end.unhandledRejections === 0 && end.uncaughtExceptions === 0 && driverUnhandled === 0, `no unhandled rejection (server ${end.unhandledRejections}, uncaught ${end.uncaughtExceptions}, driver ${driverUnhandled})`],
  [childExited === null && stillServing && end.handled === valid.sent - stats.validRejected + 1, `receiver alive and serving after the run; handler count matches accepted deliveries (${end.handled})`],
]
for (const [ok, line] of checks) console.log(`${ok ? 'PASS' : 'FAIL'} ${line}`)

child.send({ type: 'close' })
await new Promise((resolve) => { child.once('exit', resolve); setTimeout(resolve, 3_000).unref() })
agent.destroy()
keyServer.closeAllConnections()
keyServer.close()
process.exitCode = checks.every(([ok]) => ok) ? 0 : 1
