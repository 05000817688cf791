// verifyWebhook of two builds (a baseline and a candidate), paired and alternated in one process,
// CPU time per call, with the key from a KeyStore (fetched once from a stub, then cached): what a
// Node receiver pays per delivery for the key cache, the digest and the parse.
//   node --expose-gc bench/verify-pair.mjs <baseline dist> <candidate dist> [--events 1,4,100]
// Two header shapes per body: the canonical one MailChannels sends (the anchored fast path), and
// the same with a `nonce` parameter, as the HTTP harness's --unique deliveries carry (the general
// structured-field parse and profile).
// A baseline build: see bench/events-bench.mjs (git archive <commit> into a folder, then tsc there).
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import crypto from 'node:crypto'
import { parseArgs } from 'node:util'
import { CUSTOMER_HANDLE, KEY_ID, contentDigest, makeBody, makeKeyPair, signedHeaders } from './lib/fixtures.mjs'
const { positionals: [a, b], values: args } = parseArgs({ allowPositionals: true, options: { events: { type: 'string', default: '1,100' } } })
const keys = makeKeyPair()
const fetchKey = async () => new Response(JSON.stringify({ id: 'k1', key: keys.spkiB64 }), { headers: { 'content-type': 'application/json' } })
async function load (dir) {
  const m = await import(pathToFileURL(path.resolve(dir, 'index.js')).href)
  // `verifyWebhook` is the one name now; older builds had only `Webhooks.verify`.
  return { Webhooks: { verify: m.verifyWebhook ?? m.Webhooks.verify }, store: new m.KeyStore({ fetch: fetchKey }) }
}
const builds = { before: await load(a), after: await load(b) }
const gc = globalThis.gc ?? (() => {})
function cpu () { const u = process.cpuUsage(); return (u.user + u.system) / 1000 }
async function sample (fn, ms) {
  gc(); await fn()
  let calls = 0; const t0 = performance.now(); const c0 = cpu()
  while (performance.now() - t0 < ms) { for (let i = 0; i < 50; i++) await fn(); calls += 50 }
  return (cpu() - c0) * 1000 / calls // µs per call
}
/** `signedHeaders` with a `nonce` after the canonical parameters. */
function nonceHeaders (digest, nonce) {
  const params = `("content-digest");created=${Math.floor(Date.now() / 1000)};alg="ed25519";keyid="${KEY_ID}";nonce="${nonce}"`
  const sig = crypto.sign(null, Buffer.from(`"content-digest": ${digest}\n"@signature-params": ${params}`), keys.privateKey).toString('base64')
  return { 'content-type': 'application/json', 'content-digest': digest, 'signature-input': `sig_1=${params}`, signature: `sig_1=:${sig}:` }
}
for (const [n, shape] of args.events.split(',').map(Number).flatMap((n) => [[n, 'canonical'], [n, 'nonce']])) {
  const body = makeBody(n)
  const headers = shape === 'nonce' ? nonceHeaders(contentDigest(body), 'r1n2345') : signedHeaders(contentDigest(body), keys.privateKey)
  const cases = {}
  for (const [name, { Webhooks, store }] of Object.entries(builds)) {
    const r = await Webhooks.verify({ payload: body, headers, customerHandles: [CUSTOMER_HANDLE], keyStore: store })
    if (r.error) throw new Error(JSON.stringify(r.error))
    cases[name] = () => Webhooks.verify({ payload: body, headers, customerHandles: [CUSTOMER_HANDLE], keyStore: store })
  }
  const res = { before: [], after: [] }
  for (let round = 0; round < 20; round++) for (const name of round % 2 ? ['after', 'before'] : ['before', 'after']) res[name].push(await sample(cases[name], 250))
  const med = (xs) => xs.slice().sort((x, y) => x - y)[xs.length >> 1]
  const ratios = res.after.map((x, i) => x / res.before[i])
  console.log(`${n} event(s), ${shape} headers, key from a KeyStore: before ${med(res.before).toFixed(2)} µs, after ${med(res.after).toFixed(2)} µs CPU per verify; after/before median of paired rounds ${med(ratios).toFixed(3)} (min ${Math.min(...ratios).toFixed(3)}, max ${Math.max(...ratios).toFixed(3)})`)
}
