import t from 'tap'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { MailChannels, MailChannelsError } from '../../src/index.js'
import { DEFAULT_MAX_BATCHES } from '../../src/client/batches.js'
import { FAKE_API_KEY, json, useFakeApi, type FakeApi, type FakeBatch } from '../helpers/fake-api.js'

// Listings that never end: an API that ignores `offset` (the same full page again and again)
// and one that returns a full page of new ids every time. iterateBatches and reconcile stop
// with a typed error that says what was seen, after a bounded number of requests.

let api: FakeApi
let client: MailChannels
const fake = useFakeApi(t)
t.before(() => {
  api = fake.api
  client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 0 })
})

function failed (id: number): FakeBatch {
  return { batch_id: id, created_at: new Date(Date.parse('2026-01-18T00:00:00Z') + (id % 86_400) * 1000).toISOString(), customer_handle: 'acme', event_count: 1, status: 'no_response', status_code: null, webhook: 'https://hooks.example.com/a' }
}
const page = (first: number, n: number): FakeBatch[] => Array.from({ length: n }, (_, i) => failed(first + i))
const listingOnly = (answer: (req: IncomingMessage, res: ServerResponse) => void) => (req: IncomingMessage, res: ServerResponse): void => {
  if ((req.url ?? '').startsWith('/tx/v1/webhook-batch?')) answer(req, res)
  else api.answer(req, res)
}
/** Ignores offset: always the same full page. */
const sameFullPage = listingOnly((req, res) => {
  const limit = Number(new URL(req.url!, 'http://x').searchParams.get('limit') ?? 500)
  json(res, 200, { webhook_batches: page(1, limit) })
})
/** A full page of ids never seen before, every time. */
let next = 1
const endlessNewIds = listingOnly((req, res) => {
  const limit = Number(new URL(req.url!, 'http://x').searchParams.get('limit') ?? 500)
  json(res, 200, { webhook_batches: page(next, limit) })
  next += limit
})

async function drain (options: Parameters<MailChannels['webhooks']['iterateBatches']>[0]): Promise<{ seen: number, error: unknown }> {
  let seen = 0
  try {
    for await (const _ of client.webhooks.iterateBatches(options)) seen++
  } catch (err) {
    return { seen, error: err }
  }
  return { seen, error: null }
}

t.test('iterateBatches: a repeated page ends the listing with listing_repeated, after two requests', async (t) => {
  api.always = sameFullPage
  const { seen, error } = await drain({ createdAfter: '2026-01-17', createdBefore: '2026-01-20' })
  t.ok(error instanceof MailChannelsError)
  t.match((error as MailChannelsError).error, {
    type: 'listing_repeated',
    statusCode: null,
    message: /^Failed to list webhook batches: the page at offset 500 lists only batches already listed \(500 entries, batch ids 1 to 500\): the API seems to ignore offset\. Stopped after 2 pages, 1000 entries\.$/,
  })
  t.equal(seen, 500, 'the first page only: the repeat is not yielded')
  t.equal(api.batchRequests().length, 2)
})

t.test('iterateBatches: endless new ids end at maxBatches with listing_limit_reached', async (t) => {
  api.always = endlessNewIds
  const { seen, error } = await drain({ limit: 100, maxBatches: 1000 })
  t.match((error as MailChannelsError).error, {
    type: 'listing_limit_reached',
    statusCode: null,
    message: /^Failed to list webhook batches: 1000 entries in 11 pages and the listing has not ended; maxBatches \(1000\) stops it here\. Narrow the window or the filters, or raise maxBatches\.$/,
  })
  t.equal(seen, 1000, 'exactly maxBatches entries yielded')
  t.equal(api.batchRequests().length, 11, 'the 11th page shows the listing goes on')

  // A listing that ends exactly at the cap is not an error.
  api.always = null
  api.batches = page(1, 40)
  t.equal((await drain({ createdAfter: '2026-01-17', createdBefore: '2026-01-20', limit: 20, maxBatches: 40 })).error, null, 'a short (empty) third page ends it')
})

t.test('the default cap: 300,000 entries, 600 full pages of 500', async (t) => {
  t.equal(DEFAULT_MAX_BATCHES, 300_000)
})

t.test('maxBatches is validated before any request', async (t) => {
  for (const bad of [0, -1, 1.5, Number.NaN, '100', Infinity]) {
    const { error } = await drain({ maxBatches: bad as number })
    t.match((error as MailChannelsError).error, { type: 'validation_error', message: 'The maxBatches value must be a positive integer (entries listed per run).' }, String(bad))
  }
  t.equal(api.requests.length, 0)
  t.match(await client.webhooks.batches({ maxBatches: 5 } as never), { error: { type: 'validation_error', message: /^Unknown option 'maxBatches'/ } }, 'one page has no cap to set')
})

t.test('reconcile: a repeated page and endless new ids both end the listing with the typed error; nothing resent', async (t) => {
  const WINDOW = { createdAfter: '2026-01-17', createdBefore: '2026-01-20' }
  api.always = sameFullPage
  t.match(await client.webhooks.reconcile({ ...WINDOW, rate: 100 }), { data: null, error: { type: 'listing_repeated', message: /the page at offset 500 lists only batches already listed/ } })
  t.equal(api.batchRequests().length, 2)

  api.requests.length = 0
  api.always = endlessNewIds
  const started = performance.now()
  const r = await client.webhooks.reconcile({ ...WINDOW, rate: 100, maxBatches: 2000 })
  t.match(r, { data: null, error: { type: 'listing_limit_reached', message: /^Failed to list webhook batches: 2000 entries in 5 pages and the listing has not ended; maxBatches \(2000\) stops it here/ } })
  t.equal(api.batchRequests().length, 5)
  t.equal(api.requests.filter((q) => q.url.endsWith('/resend')).length, 0, 'nothing resent from a listing that did not end')
  t.ok(performance.now() - started < 20_000, 'bounded')
  t.match(await client.webhooks.reconcile({ ...WINDOW, maxBatches: 0 }), { data: null, error: { type: 'validation_error', message: 'The maxBatches value must be a positive integer (entries listed per run).' } })
})
