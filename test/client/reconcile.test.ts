import t from 'tap'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { MailChannels, type ReconcileProgress } from '../../src/index.js'
import { reconcile } from '../../src/client/reconcile.js'
import { delayed, FAKE_API_KEY, FAKE_NOW, reply, useFakeApi, type Behaviour, type FakeApi, type FakeBatch } from '../helpers/fake-api.js'

// webhooks.reconcile against the loopback fake: every page listed, each failed batch resent
// once, dry run, exclusion, abort, the rate limit (when the fake saw each resend, counted from
// the listing request: lower bounds only, never a speed), concurrency, and the stops.

let api: FakeApi
let client: MailChannels
const fake = useFakeApi(t)
t.before(() => {
  api = fake.api
  client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 0 })
})

// The sample batches (2026-01-18T00:00Z, one every 4 hours): 1001, 1005, 1009 are 4xx;
// 1002, 1006, 1010 are 5xx; 1003, 1007, 1011 had no response; the rest were delivered.
const FAILED = [1001, 1002, 1003, 1005, 1006, 1007, 1009, 1010, 1011]
const WINDOW = { createdAfter: '2026-01-17', createdBefore: '2026-01-20' }
const FAST = { ...WINDOW, rate: 100 }

const resendRequests = (): typeof api.requests => api.requests.filter((r) => r.url.endsWith('/resend'))
const resentIds = (): number[] => resendRequests().map((r) => Number(/webhook-batch\/(\d+)\/resend/.exec(r.url)![1]))

/** `n` failed batches created one minute apart from 2026-01-18T00:00Z, ids from `first`. */
function manyFailed (n: number, first = 50_000): FakeBatch[] {
  const start = Date.parse('2026-01-18T00:00:00Z')
  return Array.from({ length: n }, (_, i) => ({
    batch_id: first + i,
    created_at: new Date(start + i * 60_000).toISOString(),
    customer_handle: 'acme',
    event_count: 1,
    status: 'no_response',
    status_code: null,
    webhook: 'https://hooks.example.com/a',
  }))
}

/** Answers resends with `behaviour`, everything else normally. */
const onResend = (behaviour: Behaviour): Behaviour => (req: IncomingMessage, res: ServerResponse) => {
  if ((req.url ?? '').endsWith('/resend')) behaviour(req, res)
  else api.answer(req, res)
}

t.test('resends every failed batch of the window once, with its customer handle; the listing asks for 4xx, 5xx, no_response', async (t) => {
  const progress: ReconcileProgress[] = []
  const r = await client.webhooks.reconcile({ ...FAST, onProgress: (p) => progress.push(p) })
  t.equal(r.error, null)
  const report = r.data!
  t.same(report.window, WINDOW)
  t.same(report.batches.map((b) => [b.batchId, b.outcome]), FAILED.map((id) => [id, 'resent']))
  t.same(report.summary, { total: 9, resent: 9, failed: 0, skipped: 0, notAttempted: 0 })
  t.equal(report.stopped, null)
  t.same(resentIds(), FAILED, 'each failed batch resent once, in listing order')
  t.ok(resendRequests().every((req) => req.headers['x-customer-handle'] === 'acme'), 'X-Customer-Handle is the batch\'s handle')
  const listing = api.batchRequests()
  t.equal(listing.length, 1)
  t.equal(listing[0]!.query, 'created_after=2026-01-17&created_before=2026-01-20&statuses=4xx%2C5xx%2Cno_response&limit=500&offset=0')
  t.same(progress.map((p) => [p.done, p.total, p.outcome, p.batch.batchId]), FAILED.map((id, i) => [i + 1, 9, 'resent', id]))
  const first = report.batches[0]!
  t.match(first, { outcome: 'resent', batch: { batchId: 1001, status: '4xx_response' }, resend: { batchId: 1001, statusCode: 200 } })
})

t.test('every page, whatever their number: 1,100 failed batches over three pages', async (t) => {
  api.batches = manyFailed(1100)
  const dry = await client.webhooks.reconcile({ ...WINDOW, dryRun: true })
  t.equal(dry.error, null)
  t.same(api.batchRequests().map((r) => new URLSearchParams(r.query).get('offset')), ['0', '500', '1000'], 'pages by offset until one is short')
  t.equal(dry.data!.summary.total, 1100)
  t.ok(dry.data!.batches.every((b) => b.outcome === 'skipped' && b.reason === 'dry_run'), 'dry run: listed, reported, not resent')
  t.equal(resendRequests().length, 0, 'dry run: no resend at all')

  // Resend the ones on the second and third pages only (the rest excluded): pagination and exclusion together.
  api.requests.length = 0
  const wanted = [50_499, 50_500, 51_099]
  const exclude = new Set(manyFailed(1100).map((b) => b.batch_id).filter((id) => !wanted.includes(id)))
  const r = await client.webhooks.reconcile({ ...FAST, exclude })
  t.same(resentIds(), wanted)
  t.same(r.data!.summary, { total: 1100, resent: 3, failed: 0, skipped: 1097, notAttempted: 0 })
})

t.test('exclude: ids resent by an earlier run are skipped (numbers or decimal strings), so a rerun resends nothing twice', async (t) => {
  const first = await client.webhooks.reconcile({ ...FAST, onProgress: (p) => { if (p.done === 4) throw new Error('observer failure is ignored') } })
  const resent = first.data!.batches.filter((b) => b.outcome === 'resent').map((b) => b.batchId)
  t.same(resent, FAILED)
  api.requests.length = 0
  const rerun = await client.webhooks.reconcile({ ...FAST, exclude: [...resent.slice(0, 5), ...resent.slice(5).map(String)] })
  t.equal(resendRequests().length, 0, 'nothing resent twice')
  t.ok(rerun.data!.batches.every((b) => b.outcome === 'skipped' && b.reason === 'excluded'))
  t.same(rerun.data!.summary, { total: 9, resent: 0, failed: 0, skipped: 9, notAttempted: 0 })
})

t.test('a batch listed once per attempt is resent once', async (t) => {
  const retry = { ...api.batches[1]!, created_at: '2026-01-18T04:05:00.000Z', status: 'no_response', status_code: null }
  api.batches.splice(2, 0, retry)
  const r = await client.webhooks.reconcile(FAST)
  t.same(resentIds(), FAILED)
  t.equal(r.data!.summary.total, 9)
})

t.test('the webhook and statuses options filter the listing', async (t) => {
  const r = await client.webhooks.reconcile({ ...FAST, webhook: 'https://hooks.example.com/a', statuses: ['5xx'] })
  t.equal(new URLSearchParams(api.batchRequests()[0]!.query).get('webhook'), 'https://hooks.example.com/a')
  t.equal(new URLSearchParams(api.batchRequests()[0]!.query).get('statuses'), '5xx')
  t.same(resentIds(), [1002, 1006, 1010].filter((id) => (id - 1000) % 2 === 0))
  t.same(r.data!.batches.map((b) => b.batchId), [1002, 1006, 1010])
})

t.test('the default window: the last 3 days, fixed when the call starts', async (t) => {
  const r = await reconcile(client.webhooks, { dryRun: true }, () => FAKE_NOW + 1500)
  t.same(r.data!.window, { createdAfter: '2026-01-17T00:00:02Z', createdBefore: '2026-01-20T00:00:02Z' })
  t.equal(api.batchRequests()[0]!.query, 'created_after=2026-01-17T00%3A00%3A02Z&created_before=2026-01-20T00%3A00%3A02Z&statuses=4xx%2C5xx%2Cno_response&limit=500&offset=0')
  const onlyAfter = await reconcile(client.webhooks, { createdAfter: '2026-01-19', dryRun: true }, () => FAKE_NOW)
  t.same(onlyAfter.data!.window, { createdAfter: '2026-01-19', createdBefore: '2026-01-20T00:00:00Z' }, 'createdBefore defaults to now')
  const onlyBefore = await reconcile(client.webhooks, { createdBefore: new Date('2026-01-19T12:00:00Z'), dryRun: true }, () => FAKE_NOW)
  t.same(onlyBefore.data!.window, { createdAfter: '2026-01-16T12:00:00Z', createdBefore: '2026-01-19T12:00:00Z' }, 'createdAfter defaults to 3 days before createdBefore')
  const tooOld = await reconcile(client.webhooks, { createdAfter: '2025-12-01' }, () => FAKE_NOW)
  t.match(tooOld, { data: null, error: { type: 'validation_error', message: /^The window from createdAfter to createdBefore must not exceed 31 days \(the batch listing's limit\); createdBefore defaults to now, so give an earlier createdBefore/ } })
})

t.test('the rate limit: resends start evenly spaced, also with concurrency', async (t) => {
  for (const concurrency of [1, 3]) {
    api.requests.length = 0
    // 20 per second: the k-th resend starts at least k x 50 ms after the first one could.
    const r = await client.webhooks.reconcile({ ...WINDOW, rate: 20, concurrency })
    t.equal(r.data!.summary.resent, 9)
    // Bounds measured where nothing but the limiter can delay them: the first resend can start
    // only after the listing was asked for, and each start waits its slot, so the fake sees the
    // k-th resend no sooner than k slots after it saw the listing request. A busy machine only
    // makes them later; without the limit they would all come within a few ms. (1 ms a slot:
    // timers count whole milliseconds.)
    const listed = api.batchRequests().at(-1)!.at
    const after = resendRequests().map((req) => Math.round(req.at - listed))
    t.equal(after.length, 9)
    t.ok(after.every((ms, k) => ms >= k * (50 - 1)), `concurrency ${concurrency}: the k-th resend at least k x 50 ms after the listing request (ms after it: ${after.join(', ')})`)
  }
})

t.test('concurrency: up to n resends in flight at once', async (t) => {
  let inFlight = 0
  let most = 0
  // The fake holds the resends until `group` are in flight (or every one still to come is), so
  // the limit is always reached, however slowly the machine runs; it then gives the client 200 ms
  // more to send one too many (a few ms on an idle machine) before it answers them together. A
  // limit that lets fewer through would hold them forever: a 10 s deadline answers them, and the
  // count below fails.
  let group = 3
  let left = 9
  let held: Array<() => void> = []
  let timer: NodeJS.Timeout | undefined
  const answerHeld = (): void => {
    timer = undefined
    const now = held
    held = []
    left -= now.length
    for (const answer of now) answer()
  }
  api.always = onResend((req, res) => {
    inFlight++
    most = Math.max(most, inFlight)
    res.once('close', () => { inFlight-- })
    held.push(() => { api.answer(req, res) })
    clearTimeout(timer)
    timer = setTimeout(answerHeld, held.length >= Math.min(group, left) ? 200 : 10_000)
  })
  const r = await client.webhooks.reconcile({ ...FAST, concurrency: 3 })
  t.equal(r.data!.summary.resent, 9)
  t.equal(most, 3, 'three at once, never more')
  api.requests.length = 0
  most = 0
  group = 1
  left = 3
  await client.webhooks.reconcile({ ...FAST, statuses: ['5xx'] })
  t.equal(most, 1, 'the default: one at a time')
})

t.test('abort midway: the resend in flight finishes, no new one starts, the rest is reported not attempted', async (t) => {
  const ac = new AbortController()
  const r = await client.webhooks.reconcile({ ...FAST, signal: ac.signal, onProgress: (p) => { if (p.done === 3) ac.abort() } })
  t.equal(r.error, null)
  t.same(resentIds(), FAILED.slice(0, 3))
  t.match(r.data!.stopped, { reason: 'aborted', error: null, message: /^Stopped: the signal fired\./ })
  t.same(r.data!.summary, { total: 9, resent: 3, failed: 0, skipped: 0, notAttempted: 6 })
  t.same(r.data!.batches.slice(3).map((b) => b.outcome), Array(6).fill('not_attempted'), 'never tried: not_attempted, not skipped')

  // Aborted while waiting for its rate-limit slot: stops at once. The next slot is 100 s after
  // the first resend, so only a run that waited for it takes that long, however busy the machine.
  api.requests.length = 0
  const slow = new AbortController()
  const started = performance.now()
  const res = await client.webhooks.reconcile({ ...WINDOW, rate: 0.01, signal: slow.signal, onProgress: () => slow.abort() })
  t.ok(performance.now() - started < 100_000, 'did not wait for the next slot, 100 s later')
  t.equal(resendRequests().length, 1)
  t.equal(res.data!.stopped?.reason, 'aborted')

  // Aborted before or during the listing: an error, nothing resent.
  api.requests.length = 0
  t.match(await client.webhooks.reconcile({ ...WINDOW, signal: AbortSignal.abort() }), { data: null, error: { type: 'application_error', message: /aborted/ } })
  t.equal(api.requests.length, 0)
  const during = new AbortController()
  api.queue.push((req, res) => { during.abort(); delayed(200, api.answer)(req, res) })
  t.match(await client.webhooks.reconcile({ ...WINDOW, signal: during.signal }), { data: null, error: { type: 'application_error', message: /aborted/ } })
  t.equal(resendRequests().length, 0)
})

t.test('401 or 403 on a resend: stops at once and says to check the key', async (t) => {
  for (const status of [401, 403]) {
    api.requests.length = 0
    api.always = onResend(reply(status, { errors: ['no'] }))
    const r = await client.webhooks.reconcile({ ...FAST, concurrency: 1 })
    t.equal(resendRequests().length, 1, `${status}: one resend, then stop`)
    t.match(r.data!.stopped, { reason: 'auth_error', error: { statusCode: status }, message: new RegExp(`^Stopped: the API refused the API key \\(HTTP ${status}\\)\\. Check MAILCHANNELS_API_KEY`) })
    t.same(r.data!.summary, { total: 9, resent: 0, failed: 1, skipped: 0, notAttempted: 8 })
    t.match(r.data!.batches[0], { outcome: 'failed', error: { statusCode: status }, resend: null })
  }
  api.always = null
  api.requests.length = 0
  api.queue.push(reply(401, { errors: ['bad key'] }))
  t.match(await client.webhooks.reconcile(FAST), { data: null, error: { type: 'authentication_error', statusCode: 401 } }, 'a 401 on the listing is the call\'s error')
  t.equal(resendRequests().length, 0)
})

t.test('repeated failures stop the run; errors about one batch do not count', async (t) => {
  api.always = onResend(reply(503, { errors: ['busy'] }))
  const r = await client.webhooks.reconcile({ ...FAST, stopAfterFailures: 3 })
  t.equal(resendRequests().length, 3, 'three 503s in a row, then stop (a POST is not retried)')
  t.match(r.data!.stopped, { reason: 'repeated_failures', error: { statusCode: 503 }, message: /^Stopped after 3 failed resends in a row/ })
  t.same(r.data!.summary, { total: 9, resent: 0, failed: 3, skipped: 0, notAttempted: 6 })

  api.requests.length = 0
  api.always = onResend(reply(404, { errors: ['Batch not found'] }))
  const gone = await client.webhooks.reconcile({ ...FAST, stopAfterFailures: 2 })
  t.equal(resendRequests().length, 9, '404s are about one batch each: the run goes on')
  t.equal(gone.data!.stopped, null)
  t.same(gone.data!.summary, { total: 9, resent: 0, failed: 9, skipped: 0, notAttempted: 0 })
})

t.test('the endpoint still failing: delivery_failed per batch, and a stop after the default 5 in a row', async (t) => {
  for (const id of FAILED) api.resendAnswers.set(id, id === 1001 ? null : 503)
  api.resendAnswers.set(1003, 204)
  const r = await client.webhooks.reconcile(FAST)
  t.match(r.data!.batches[0], { outcome: 'failed', error: { type: 'delivery_failed', statusCode: null, message: 'MailChannels resent batch 1001, but the endpoint did not answer: it still does not accept the delivery.' }, resend: { batchId: 1001, statusCode: null } })
  t.match(r.data!.batches[1], { outcome: 'failed', error: { type: 'delivery_failed', message: /answered HTTP 503/ }, resend: { statusCode: 503 } })
  t.match(r.data!.batches[2], { outcome: 'resent', resend: { statusCode: 204 } })
  t.same(resentIds(), [1001, 1002, 1003, 1005, 1006, 1007, 1009, 1010], 'a success resets the count: 2 failures, 1 success, then 5 failures')
  t.match(r.data!.stopped, { reason: 'repeated_failures', message: /the endpoint https:\/\/hooks\.example\.com\/.* still does not answer 2xx\. Fix it, then run reconcile again\.$/ })
})

t.test('options are validated first: validation_error, no HTTP call', async (t) => {
  const cases: Array<[unknown, RegExp]> = [
    ['x', /^reconcile options must be an object\.$/],
    [{ since: '3d' }, /^Unknown option 'since'\. Valid options are: createdAfter, createdBefore, statuses, webhook, dryRun, concurrency, rate, exclude, signal, onProgress, stopAfterFailures, retryNonIdempotent, maxBatches\.$/],
    [{ createdAfter: 'yesterday' }, /^The 'createdAfter' value is not a valid date/],
    [{ createdBefore: '2026-02-30' }, /^The 'createdBefore' value is not a valid date/],
    [{ createdAfter: '2026-01-05', createdBefore: '2026-01-05' }, /^createdBefore must be later than createdAfter\.$/],
    [{ createdAfter: '2026-01-01', createdBefore: '2026-02-02' }, /must not exceed 31 days/],
    [{ ...WINDOW, statuses: [] }, /^statuses must list at least one status/],
    [{ ...WINDOW, statuses: ['2xx'] }, /must not include '2xx'/],
    [{ ...WINDOW, statuses: ['6xx'] }, /Invalid status filter provided/],
    [{ ...WINDOW, webhook: '' }, /The webhook value must be a non-empty string/],
    [{ ...WINDOW, dryRun: 'yes' }, /^dryRun must be true or false\.$/],
    [{ ...WINDOW, concurrency: 0 }, /^concurrency must be an integer from 1 to 16\.$/],
    [{ ...WINDOW, concurrency: 1.5 }, /^concurrency must be an integer/],
    [{ ...WINDOW, rate: 0 }, /^rate must be a number of resends per second above 0 and at most 100\.$/],
    [{ ...WINDOW, rate: Infinity }, /^rate must be/],
    [{ ...WINDOW, exclude: 'abc' }, /^exclude must be an iterable \(a Set or an array\) of batch ids\.$/],
    [{ ...WINDOW, exclude: [1, 'x'] }, /^exclude: The batchId must be a positive integer/],
    [{ ...WINDOW, stopAfterFailures: 0 }, /^stopAfterFailures must be a positive integer\.$/],
    [{ ...WINDOW, signal: {} }, /^signal must be an AbortSignal\.$/],
    [{ ...WINDOW, onProgress: 'log' }, /^onProgress must be a function\.$/],
  ]
  for (const [options, message] of cases) {
    t.match(await client.webhooks.reconcile(options as never), { data: null, error: { type: 'validation_error', statusCode: null, message } }, JSON.stringify(options))
  }
  t.equal(api.requests.length, 0)
})

t.test('nothing failed: an empty report, no resend', async (t) => {
  api.batches = api.batches.filter((b) => b.status === '2xx_response')
  const r = await client.webhooks.reconcile(FAST)
  t.same(r.data, { window: WINDOW, batches: [], summary: { total: 0, resent: 0, failed: 0, skipped: 0, notAttempted: 0 }, stopped: null })
  t.equal(resendRequests().length, 0)
})

t.test('a listing that repeats the same full page is refused, not looped on', async (t) => {
  const page = manyFailed(500)
  api.always = (req, res) => {
    if ((req.url ?? '').startsWith('/tx/v1/webhook-batch?')) reply(200, { webhook_batches: page })(req, res)
    else api.answer(req, res)
  }
  t.match(await client.webhooks.reconcile({ ...WINDOW, dryRun: true }), { data: null, error: { type: 'listing_repeated', message: /the page at offset 500 lists only batches already listed/ } })
  t.equal(api.batchRequests().length, 2)
})

t.test('a listing that ignores its filters: every batch re-checked, what does not match is skipped with the reason and never resent', async (t) => {
  const [wanted] = manyFailed(1, 70_000)
  const delivered = { ...wanted!, batch_id: 70_001, status: '2xx_response', status_code: 200 }
  const old = { ...wanted!, batch_id: 70_002, created_at: '2019-03-01T00:00:00.000Z' }
  const future = { ...wanted!, batch_id: 70_003, created_at: '2099-01-01T00:00:00Z' }
  const otherEndpoint = { ...wanted!, batch_id: 70_004, webhook: 'https://elsewhere.example/h' }
  const fourXx = { ...wanted!, batch_id: 70_005, status: '4xx_response', status_code: 404 }
  const atEnd = { ...wanted!, batch_id: 70_006, created_at: '2026-01-20T00:00:00Z' }
  const unreadable = { ...wanted!, batch_id: 70_007, created_at: 'yesterday' }
  const everything = [wanted!, delivered, old, future, otherEndpoint, fourXx, atEnd, unreadable]
  api.always = (req, res) => {
    // Whatever the query asks, the same list.
    if ((req.url ?? '').startsWith('/tx/v1/webhook-batch?')) reply(200, { webhook_batches: everything })(req, res)
    else api.answer(req, res)
  }
  api.batches = everything
  const r = await client.webhooks.reconcile({ ...FAST, statuses: ['no_response', '5xx'], webhook: 'https://hooks.example.com/a' })
  t.equal(r.error, null)
  t.same(resentIds(), [70_000], 'only the batch that matches every filter is resent')
  t.same(r.data!.batches.map((b) => [b.batchId, b.outcome, b.outcome === 'skipped' ? b.reason : null]), [
    [70_000, 'resent', null],
    [70_001, 'skipped', 'status_not_requested'],
    [70_002, 'skipped', 'outside_window'],
    [70_003, 'skipped', 'outside_window'],
    [70_004, 'skipped', 'other_webhook'],
    [70_005, 'skipped', 'status_not_requested'],
    [70_006, 'skipped', 'outside_window'],
    [70_007, 'skipped', 'outside_window'],
  ])
  t.same(r.data!.summary, { total: 8, resent: 1, failed: 0, skipped: 7, notAttempted: 0 })

  // A dry run reports the same: none of them would be resent.
  api.requests.length = 0
  const dry = await client.webhooks.reconcile({ ...WINDOW, dryRun: true })
  t.same(dry.data!.batches.filter((b) => b.outcome === 'skipped' && b.reason === 'dry_run').map((b) => b.batchId), [70_000, 70_004, 70_005], 'with the default statuses and no endpoint filter')
  t.equal(resendRequests().length, 0)
})
