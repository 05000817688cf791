#!/usr/bin/env node
// Prints test/README.md, which holds the bad-input catalogue (ROWS below: each row a bad or
// hostile input and the answer the library must give, ids A1..I2) and which named test covers
// each row. Tests carry row ids in their names ('A1 ...', 'C2 C3: ...', 'B3-B9 ...' ranges too);
// this script greps every test/**/*.test.ts for them. Add a row here, then name a test after it.
//   node test/catalogue-map.mjs > test/README.md
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.dirname(fileURLToPath(import.meta.url))

/** The bad-input catalogue: row id, and the bad input -> the expected answer. */
const ROWS = [
  ['A1', 'body tampered, headers unchanged -> 401 digest_mismatch'],
  ['A2', 'tampered body + recomputed digest, original signature -> 401 signature_invalid'],
  ['A3', 'Content-Digest sha-256=:AAAA: (3 bytes) -> 400 malformed_header'],
  ['A4', 'Content-Digest md5 (re-signed) -> 401 unsupported_algorithm'],
  ['A5', 'sha-256 ok + wrong sha-512 (re-signed) -> 401 digest_mismatch'],
  ['A6', 'SHA-256=:..: / sha-256=<b64 without colons> -> 400'],
  ['A7', 'Content-Digest absent -> 400 missing_header'],
  ['A8', 'empty body with its digest (re-signed) -> 400 invalid_payload'],
  ['A9', 'covered components () -> 400 malformed_header'],
  ['A10', 'other covered components -> 400 malformed_header'],
  ['A11', 'duplicate covered component -> 400'],
  ['B1', 'exact resend within the window -> 200 duplicate, handler once'],
  ['B2', 'two identical valid requests concurrently -> handler once'],
  ['B3', 'created NOW-301 / NOW-86400 -> 401 signature_expired'],
  ['B4', 'created NOW+61 -> 401 signature_from_future'],
  ['B5', 'created absent -> 400 malformed_header'],
  ['B6', 'created String / Decimal / Date / -1 -> 400 (or 401 expired for -1)'],
  ['B7', 'created 16 digits -> 400; leading zero -> accepted'],
  ['B8', 'expires=NOW-1 (re-signed) -> 401 signature_expired'],
  ['B9', 'customer_handle acct_other -> 403 customer_not_allowed'],
  ['B10', 'replayed to a route configured for another account -> 403'],
  ['B11', 'handler throws, identical retry -> 500 then processed'],
  ['C1', 'no Signature-Input / Signature / none -> 400 missing_header'],
  ['C2', 'two Signature-Input field lines -> 400 malformed_header'],
  ['C3', 'two signatures in Signature-Input -> 400, 0 fetches for k2'],
  ['C4', 'Signature label differs from Signature-Input -> 400'],
  ['C5', 'Signature with a duplicate label -> 400'],
  ['C6', 'duplicate created parameter -> 400'],
  ['C7', 'invalid structured fields (case, no parens, unclosed, trailing comma) -> 400'],
  ['C8', 'keyid raw UTF-8 / Token / bytes; alg Token -> 400'],
  ['C9', 'Signature-Input of 8 KiB; headers > 16 KiB -> 400 / 431'],
  ['C10', 'the three headers only as trailers -> 400 missing_header'],
  ['C11', 'Signature sig_1=:!!!!: -> 400'],
  ['C12', 'signature of 63/65/0 bytes, zeros, S+L -> 401 signature_invalid'],
  ['C13', 'obs-fold or CR in a header -> 400 from Node'],
  ['D1', 'alg hmac-sha256 / rsa / ecdsa / ED25519 -> 401 unsupported_algorithm, 0 fetches'],
  ['D2', 'alg absent (re-signed) -> accepted'],
  ['D3', 'key API serves RSA / X25519 / P-256 -> 503 key_unavailable, not cached'],
  ['D4', 'key API serves a small-order key -> 503, not cached'],
  ['D5', 'key API answers another id -> 503, not cached'],
  ['D6', 'signed by a different Ed25519 key -> 401 signature_invalid'],
  ['E1', '1,000 random keyids -> 401/503, fetches within budget'],
  ['E2', '100 concurrent requests, one uncached keyid -> 1 fetch'],
  ['E3', 'keyid of 10,000 characters -> 400 (or 431)'],
  ['E4', 'keyid ../../send, &id=, #, %2e -> 400 / exact URL'],
  ['E5', 'unknown keyid but expired or wrong digest -> 401, 0 fetches'],
  ['E6', 'upstream 404, then 50 more for the same id -> 1 fetch'],
  ['F1', '1 MiB + 1 body (Content-Length / chunked) -> 413'],
  ['F2', 'Content-Length 50, 100 bytes sent -> 400'],
  ['F3', 'Content-Encoding gzip / br / bomb -> 415, nothing inflated'],
  ['F4', 'Content-Type text/plain / missing / utf-16 -> accepted when correctly signed (415 only with contentTypes)'],
  ['F5', 'invalid UTF-8 body (re-signed) -> 400 invalid_payload'],
  ['F6', 'BOM + body (re-signed) -> 400'],
  ['F7', 'object / [1,"x",null] / "x" (re-signed) -> 400'],
  ['F8', '[] (re-signed) -> 200, zero events'],
  ['F9', '100,000-deep nesting (re-signed) -> 400, no RangeError'],
  ['F10', '10,001 events -> 413 payload_too_large'],
  ['F11', '__proto__ / constructor.prototype keys -> 400, no pollution'],
  ['F12', 'duplicate customer_handle keys -> 403 (last wins, same value seen)'],
  ['F13', 'timestamp string / 1e400 / -1, event missing, recipients "x" -> 400'],
  ['F14', 'unknown event type, \\u0000 and lone surrogates -> 200 unknown variant'],
  ['G1', 'headers trickled -> closed at headersTimeout (408)'],
  ['G2', 'body trickled -> closed at requestTimeout (408); warning when 0'],
  ['G3', '500 idle keep-alive sockets -> closed; valid request still served'],
  ['H1', 'batches proxy: no/wrong credentials -> 401, 0 upstream calls'],
  ['H2', 'batches route without authorize -> registration throws'],
  ['H3', 'bad limit values -> 400 validation_error'],
  ['H4', 'bad offset -> 400'],
  ['H5', 'bad statuses -> 400'],
  ['H6', 'bad date range -> 400'],
  ['H7', 'unknown query keys -> 400'],
  ['H8', 'client X-Api-Key / X-Customer-Handle ignored'],
  ['H9', 'upstream redirect -> 502, nothing leaked'],
  ['H10', 'upstream 429 Retry-After -> bounded retries, 503'],
  ['H11', 'upstream 500/503 HTML -> 502/503, body not echoed'],
  ['H12', 'upstream 200 garbage -> 502, no TypeError'],
  ['H13', 'upstream hang / reset / 100 MiB -> 504 / 502 / 502'],
  ['H14', 'upstream 400 -> 502 invalid_request_error'],
  ['I1', 'every rejection: ErrorResponse schema, no key or URL, no-store'],
  ['I2', 'captured logs never contain the API key'],
]
const IDS = new Set(ROWS.map(([id]) => id))

/** A list of row ids and ranges, at the start of a text: "C1 C2 I1", "B3-B9", "H3, H5". */
const ID_LIST = /^(?:[A-I]\d{1,2}\b(?:\s*(?:-|–|\.\.)\s*[A-I]\d{1,2}\b)?[\s,/]*)+/

/**
 * Row ids named in a test title: a list at its start ("C1 C2 I1: ...") or opening a parenthesis
 * ("... (F3)", "(F1: 1,048,577 bytes)"); single ids and same-letter ranges ("B3-B9", "C2–C5",
 * "H8..H14"). Elsewhere an id-like word is not a row ("upstream C1 controls").
 */
export function idsIn (title) {
  const found = new Set()
  const lists = [title, ...[...title.matchAll(/\(([^)]*)\)/g)].map((m) => m[1])].map((text) => text.match(ID_LIST)?.[0] ?? '')
  for (const list of lists) {
    // Every id of a list must be a row: "(C0, C1, bidi)" names control characters, not rows.
    if (![...list.matchAll(/[A-I]\d{1,2}/g)].every((m) => IDS.has(m[0]))) continue
    for (const m of list.matchAll(/\b([A-I])(\d{1,2})\s*(?:-|–|\.\.)\s*([A-I])(\d{1,2})\b/g)) {
      if (m[1] !== m[3]) continue
      for (let n = Number(m[2]); n <= Number(m[4]); n++) if (IDS.has(`${m[1]}${n}`)) found.add(`${m[1]}${n}`)
    }
    for (const m of list.matchAll(/\b([A-I])(\d{1,2})\b/g)) if (IDS.has(m[0])) found.add(m[0])
  }
  return found
}

function tsFiles (dir) {
  return fs.readdirSync(dir, { recursive: true })
    .filter((f) => String(f).endsWith('.ts') && !String(f).includes('node_modules'))
    .map((f) => path.join(dir, String(f)))
    .sort()
}

/**
 * The files whose tests run: every *.test.ts, plus shared suites (helpers that declare
 * `t.test`s) labelled with the test files that import them.
 */
function sources (dir) {
  const all = tsFiles(dir)
  const tests = all.filter((f) => f.endsWith('.test.ts'))
  const imports = new Map(tests.map((f) => [f, [...fs.readFileSync(f, 'utf8').matchAll(/from '(\.[^']+)\.js'/g)].map((m) => path.resolve(path.dirname(f), `${m[1]}.ts`))]))
  const out = tests.map((f) => ({ file: f, label: `\`${path.relative(path.dirname(dir), f)}\`` }))
  for (const helper of all.filter((f) => !f.endsWith('.test.ts'))) {
    const users = tests.filter((f) => imports.get(f).includes(helper))
    if (users.length > 0) out.push({ file: helper, label: `\`${path.relative(path.dirname(dir), helper)}\` (run by ${users.map((u) => path.basename(u)).join(', ')})` })
  }
  return out
}

/** Test titles: the first string argument of every `.test(` call (quotes or a template). */
function titles (source) {
  const out = []
  for (const m of source.matchAll(/\.test\(\s*(['"`])((?:\\.|(?!\1)[^\\])*)\1/g)) out.push(m[2])
  return out
}

/**
 * Case names of table-driven tests (a title built with `${...}` from a table): string
 * literals that start with a row id, e.g. `'D3 RSA-2048 SPKI PEM': () => ...`.
 */
function tableCases (source) {
  const out = []
  for (const m of source.matchAll(/(['"`])([A-I]\d{1,2}(?:[ :,][^'"`\n]*)?)\1/g)) out.push(m[2])
  return out
}

const coverage = new Map(ROWS.map(([id]) => [id, []]))
const escape = (s) => s.replace(/\|/g, '\\|')
for (const { file, label } of sources(ROOT)) {
  const rel = label
  const source = fs.readFileSync(file, 'utf8')
  const named = new Set()
  for (const title of titles(source)) {
    for (const id of idsIn(title)) {
      coverage.get(id).push(`${rel}: ${escape(title)}`)
      named.add(id)
    }
  }
  if (titles(source).some((title) => title.includes('${'))) {
    for (const name of tableCases(source)) {
      for (const id of idsIn(name)) {
        if (named.has(id)) continue
        coverage.get(id).push(`${rel}: table case "${escape(name)}"`)
        named.add(id)
      }
    }
  }
}

const gaps = ROWS.filter(([id]) => coverage.get(id).length === 0).map(([id]) => id)
const lines = [
  '# Tests',
  '',
  'Run everything with `npm test` (build, then tap over `test/**/*.test.ts` with the type-check beside it). One file: `npx tap test/verify/verify-bad-input.test.ts`.',
  '',
  'Folders mirror `src/` (a test of `src/keys/` is in `keys/`), one exception: `src/testing/` is tested in the folders named after its parts, `sandbox/` (src/testing/sandbox/) and `inspector/` (src/testing/inspector/), and its `signWebhook` in `interop/` (against independent signers and verifiers); the suites that cut across the source (properties, runtimes, packaging, examples, the README) have folders of their own. Shared helpers are in `helpers/` (one fake MailChannels API, real redis-server and PostgreSQL starters, signing and key-server helpers), test vectors in `fixtures/`.',
  '',
  '| Folder | What it holds |',
  '|---|---|',
  '| `verify/` | example-based verification tests: every catalogue row of the core pipeline, known-answer vectors (RFC 9421 §B.2.6, RFC 9530, a delivery signed with the RFC 8032 §7.1 TEST 1 key, Wycheproof), header strictness, options, prototype poisoning |',
  '| `keys/`, `crypto/` | the key store, key budget, key faults and refresh; the Node and WebCrypto ports and libsodium |',
  '| `events/` | the typed events by example: typed keys per type, `fields`, unknown types, the customer policy, refused bodies |',
  '| `receiver/` | the request pipeline through a tiny port (every outcome, settlement, options passed through) |',
  '| `postgres/`, `sqlite/` | the transactional inbox on a real PostgreSQL server and on SQLite files, crash tests in child processes |',
  '| `package/`, `readme/`, `examples/`, `runtimes/` | exports, the module graph, bundle size and the packed tarball; the README\'s snippets and quick start; the examples; workerd, Deno, Bun and edge-runtime |',
  '| `property/` | fast-check properties: single-byte mutations, hostile header strings, duplicated members, legal SF reformattings, fast/strict parser agreement, the `created` window, prototype-safe JSON, the Content-Digest verdict, a model-based KeyStore test |',
  '| `fastify/`, `express/` | the adapters through `fastify.inject` / a real Express server on 127.0.0.1 |',
  '| `nestjs/` | the NestJS module: real Nest apps on platform-express and platform-fastify (`@nestjs/testing`, 127.0.0.1), start-up checks, handlers as providers under exactly once on Redis, PostgreSQL and SQLite, the BullMQ hand-off |',
  '| `batches-route/`, `client/` | the batches proxy and the API client against a loopback fake MailChannels API |',
  '| `replay/` | memory and Redis claim stores, for deliveries and events (the per-delivery faces included) (a real `redis-server`, and a local six-node Redis Cluster with failovers) |',
  '| `dispatch/`, `receivers-dispatch/` | the `WebhookEventRouter` (typing, statuses, exactly-once claims in memory and Redis) and every receiver with `handlers` / `enqueue` |',
  '| `dead-letters/` | dead letters: one store contract on memory, Redis, the six-node Redis Cluster, PostgreSQL and SQLite files; the router parking one poison event among 1,000; crash cases and concurrent retries in child processes; the `dead-letters` CLI against all three servers |',
  '| `bullmq/` | the BullMQ hand-off: jobs per event, worker processes killed mid-job, the example, a Redis Cluster |',
  '| `diagnostics/` | the diagnostics channels per outcome, silence without subscribers, the Prometheus and OpenTelemetry recipes |',
  '| `sandbox/`, `cli/`, `inspector/`, `interop/` | the signing sandbox, the operator CLI (built binary), the inspector pages in headless Chromium; deliveries cross-checked with independent signers |',
  '',
  '## Property tests',
  '',
  'Each property runs with a fixed seed (`FC_SEED`, default `20260521`), so CI is deterministic. On failure fast-check',
  'prints the seed, the shrink path and the counterexample; replay it with `FC_SEED=<seed> npx tap test/property/<file>.test.ts`.',
  '`FC_RUNS_SCALE=10` multiplies the run counts for a deeper local search.',
  '',
  '## Soak',
  '',
  '`npm run soak` (60 s after a 5 s warm-up; `npm run soak -- --seconds N --warmup N --concurrency N`) drives the Fastify plugin',
  'in a child process over loopback with valid, tampered, random-keyid, oversize, slow-body and malformed deliveries and prints',
  'throughput, latency, rejections by reason, key fetches against the budget, RSS, then PASS/FAIL lines (exit code 0 only if all',
  'pass). It exercises rows E1, F1 and G2 under load. It is not part of `npm test`.',
  '',
  '## Bad-input catalogue -> tests',
  '',
  'Every bad or hostile input the library must refuse or survive, with the answer it must give, and the tests that',
  'hold it. Rows by letter: A Content-Digest and covered components, B freshness, replay and the customer handle,',
  'C signature header syntax, D algorithms and served keys, E key ids and the key-fetch budget, F request bodies,',
  'G slow clients, H the batch-listing route, I every rejection. Tests name the rows they cover (`A1 ...`,',
  '`B3-B9 ...`); comments cite them as "row F11 in test/README.md". Why each answer is what it is: docs/security.md.',
  '',
  'Generated by `node test/catalogue-map.mjs > test/README.md` from the rows in that script and the row ids in test',
  'names; edit the script, not this file.',
  '',
  '| Row | Bad input -> expected | Tests |',
  '|---|---|---|',
  ...ROWS.map(([id, summary]) => {
    const tests = coverage.get(id)
    return `| ${id} | ${summary.replace(/\|/g, '\\|')} | ${tests.length === 0 ? '**no test**' : tests.join('<br>')} |`
  }),
  '',
  `Rows with no named test: ${gaps.length === 0 ? 'none' : gaps.join(', ')}.`,
  '',
]
process.stdout.write(lines.join('\n'))
