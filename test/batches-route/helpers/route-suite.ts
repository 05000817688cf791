import type { Test } from 'tap'
import { MailChannels } from '../../../src/index.js'
import { FAKE_API_KEY, hang, huge, json, redirect, reply, resetMidBody, sampleBatches, startStealServer, useFakeApi, type FakeApi } from '../../helpers/fake-api.js'

// One behaviour table for both adapters (rows H1-H14, I1, I2 in test/README.md). Each adapter test
// supplies `start`, which mounts the route at /webhooks/batches with `authorize` below and
// returns a way to send GET requests plus the captured log text.

export const TOKEN = 'route-test-token'

export interface RouteResponse {
  statusCode: number
  headers: Record<string, string | string[] | undefined>
  body: any
}

export interface MountedRoute {
  get (url: string, headers?: Record<string, string>): Promise<RouteResponse>
  logs (): string
  close (): Promise<void>
}

export type Start = (client: MailChannels) => Promise<MountedRoute>

/**
 * Bearer TOKEN allows; `x-test-auth: forbidden` returns {statusCode: 403}; `throw` / `throw403`
 * throw; `getter-throws` returns an object whose `statusCode` getter throws.
 */
export async function authorize (req: { headers: Record<string, string | string[] | undefined> }): Promise<boolean | { statusCode: 403 }> {
  const mode = req.headers['x-test-auth']
  if (mode === 'getter-throws') return { get statusCode (): 403 { throw new Error('getter internals') } }
  if (mode === 'throw') throw new Error('auth backend down')
  if (mode === 'throw403') throw Object.assign(new Error('nope'), { statusCode: 403 })
  if (mode === 'forbidden') return { statusCode: 403 }
  if (mode === 'truthy') return 'yes' as unknown as boolean
  return req.headers.authorization === `Bearer ${TOKEN}`
}

const AUTH = { authorization: `Bearer ${TOKEN}` }

export function routeSuite (t: Test, start: Start): void {
  let api: FakeApi
  let route: MountedRoute
  let routeFast: MountedRoute
  let routeNoRetry: MountedRoute
  const all: MountedRoute[] = []
  const mount = async (c: MailChannels): Promise<MountedRoute> => {
    const r = await start(c)
    all.push(r)
    return r
  }

  const fake = useFakeApi(t)
  t.before(async () => {
    api = fake.api
    route = await mount(new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 0 }))
    routeFast = await mount(new MailChannels(FAKE_API_KEY, { baseUrl: api.url, timeout: 200, maxRetries: 0 }))
    routeNoRetry = await mount(new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 2, maxRetryDelay: 2000 }))
  })
  t.teardown(async () => {
    for (const r of all) await r.close()
  })

  const checkErrorBody = (t: Test, res: RouteResponse, status: number, code: string): void => {
    t.equal(res.statusCode, status, `status ${status}`)
    t.same(Object.keys(res.body).sort(), ['code', 'error', 'message', 'statusCode'], 'error shape')
    t.equal(res.body.statusCode, status)
    t.equal(res.body.code, code)
    t.equal(res.headers['cache-control'], 'no-store')
    const raw = JSON.stringify(res.body) + JSON.stringify(res.headers)
    t.notMatch(raw, FAKE_API_KEY, 'no API key')
    t.notMatch(raw, `127.0.0.1:${api.port}`, 'no upstream URL')
    t.notMatch(raw, '/tx/v1', 'no upstream path')
  }

  t.test('H1: no or wrong credentials -> 401 unauthorized, no upstream call', async (t) => {
    const denied: Array<Record<string, string>> = [{}, { authorization: 'Bearer wrong' }, { 'x-test-auth': 'truthy' }, { 'x-test-auth': 'throw' }]
    for (const headers of denied) {
      const res = await route.get('/webhooks/batches?limit=1', headers)
      checkErrorBody(t, res, 401, 'unauthorized')
    }
    checkErrorBody(t, await route.get('/webhooks/batches', { 'x-test-auth': 'forbidden' }), 403, 'forbidden')
    checkErrorBody(t, await route.get('/webhooks/batches', { 'x-test-auth': 'throw403' }), 403, 'forbidden')
    // Authorization runs before query validation: an unauthenticated caller learns nothing about the query rules.
    checkErrorBody(t, await route.get('/webhooks/batches?foo=1'), 401, 'unauthorized')
    t.equal(api.requests.length, 0)
  })

  t.test('H1: an authorize result whose statusCode getter throws -> 401 with no-store, nothing echoed', async (t) => {
    const res = await route.get('/webhooks/batches', { 'x-test-auth': 'getter-throws' })
    checkErrorBody(t, res, 401, 'unauthorized')
    t.notMatch(JSON.stringify(res.body), 'getter internals')
    t.equal(api.requests.length, 0)
  })

  t.test('pagination near Number.MAX_SAFE_INTEGER: every emitted link is one the route accepts', async (t) => {
    // An upstream that has a full page at any offset.
    api.always = (req, res) => {
      const limit = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('limit') ?? 500)
      json(res, 200, { webhook_batches: sampleBatches().slice(0, limit) })
    }
    const a = await route.get('/webhooks/batches?limit=2&offset=999999999999999', AUTH)
    t.equal(a.statusCode, 200)
    t.equal(a.body.pagination.nextOffset, 1000000000000001)
    const next = /^<([^>]+)>; rel="next"$/.exec(String(a.headers.link))?.[1]
    t.equal(next, '/webhooks/batches?limit=2&offset=1000000000000001')
    const b = await route.get(next ?? '/', AUTH)
    t.equal(b.statusCode, 200, 'the 16-digit offset of the link is accepted')
    t.equal(b.body.pagination.offset, 1000000000000001)

    const max = Number.MAX_SAFE_INTEGER
    const last = await route.get(`/webhooks/batches?limit=2&offset=${max - 1}`, AUTH)
    t.equal(last.statusCode, 200)
    t.equal(last.body.pagination.nextOffset, null, 'no next offset past the safe range')
    t.equal(last.headers.link, undefined, 'no link the route would refuse')
    t.equal((await route.get(`/webhooks/batches?limit=2&offset=${max}`, AUTH)).statusCode, 200)
    const over = await route.get(`/webhooks/batches?limit=2&offset=${max + 1}`, AUTH)
    checkErrorBody(t, over, 400, 'validation_error')
    t.match(over.body.message, /offset value must be an integer/)
    checkErrorBody(t, await route.get('/webhooks/batches?offset=00000000000000001', AUTH), 400, 'validation_error')
  })

  t.test('H3-H7: query validation -> 400 validation_error, no upstream call', async (t) => {
    const cases: Array<[string, RegExp]> = [
      ['limit=0', /limit value must be an integer between 1 and 500/],
      ['limit=501', /limit/],
      ['limit=abc', /limit/],
      ['limit=1.5', /limit/],
      ['limit=', /limit/],
      ['limit=-1', /limit/],
      ['limit=1&limit=2', /'limit' is repeated/],
      ['limit[]=1', /Unknown query parameter 'limit\[\]'/],
      ['offset=-1', /offset value must be an integer greater than or equal to 0/],
      ['offset=x', /offset/],
      ['offset=1e3', /offset/],
      ['statuses=2xx,2xx', /Status filters must be unique/],
      ['statuses=6xx', /Invalid status filter/],
      ['statuses=1xx,2xx,3xx,4xx,5xx,no_response,2xx', /A maximum of 6 status filters/],
      ['statuses=4xx&statuses=5xx', /'statuses' is repeated/],
      ['statuses=4xx,', /Invalid status filter/],
      ['createdAfter=2024-01-01&createdBefore=2024-03-01', /must not exceed 31 days/],
      ['createdAfter=2024-01-02&createdBefore=2024-01-01', /createdBefore must be later than createdAfter/],
      ['createdAfter=yesterday', /'createdAfter' value is not a valid date/],
      ['createdAfter=2026-02-30', /'createdAfter' value is not a valid date/],
      ['createdBefore=2026-13-01', /'createdBefore' value is not a valid date/],
      ['created_after=2026-01-01', /Unknown query parameter 'created_after'/],
      ['foo=bar', /Unknown query parameter 'foo'/],
      ['api_key=x', /Unknown query parameter 'api_key'/],
      ['__proto__[x]=1', /Unknown query parameter '__proto__\[x\]'/],
      ['constructor=1', /Unknown query parameter/],
      ['webhook=', /webhook value must be a non-empty string/],
      [`webhook=${'a'.repeat(5000)}`, /query string is too long/],
    ]
    for (const [query, message] of cases) {
      const res = await route.get(`/webhooks/batches?${query}`, AUTH)
      checkErrorBody(t, res, 400, 'validation_error')
      t.match(res.body.message, message, query)
      t.equal(res.body.error, 'Bad Request')
    }
    t.equal(api.requests.length, 0, 'no upstream call for any of them')
  })

  t.test('pagination: page, nextOffset and Link rel="next" carrying the same filters', async (t) => {
    const first = await route.get('/webhooks/batches?statuses=4xx,5xx&limit=2', AUTH)
    t.equal(first.statusCode, 200)
    t.equal(first.headers['cache-control'], 'no-store')
    t.match(first.headers['content-type'], /^application\/json/)
    t.same(first.body.pagination, { limit: 2, offset: 0, nextOffset: 2 })
    t.same(first.body.data.map((b: { batchId: number }) => b.batchId), [1001, 1002])
    t.same(first.body.data[0], { batchId: 1001, createdAt: '2026-01-18T04:00:00.000Z', customerHandle: 'acme', duration: { unit: 'milliseconds', value: 10 }, eventCount: 2, status: '4xx_response', statusCode: 404, webhook: 'https://hooks.example.com/b?token=t' })
    t.equal(first.headers.link, '</webhooks/batches?statuses=4xx%2C5xx&limit=2&offset=2>; rel="next"')
    t.equal(api.requests[0]!.query, 'statuses=4xx%2C5xx&limit=2', 'statuses sent upstream as one comma-separated parameter')

    // Follow the Link header to the end.
    const ids: number[] = first.body.data.map((b: { batchId: number }) => b.batchId)
    let link = first.headers.link as string | undefined
    let pages = 1
    while (link !== undefined) {
      const next = /^<([^>]+)>; rel="next"$/.exec(link)![1]!
      const res = await route.get(next, AUTH)
      t.equal(res.statusCode, 200)
      ids.push(...res.body.data.map((b: { batchId: number }) => b.batchId))
      link = res.headers.link as string | undefined
      if (link === undefined) t.equal(res.body.pagination.nextOffset, null, 'last page: nextOffset null')
      pages++
    }
    t.same(ids, [1001, 1002, 1005, 1006, 1009, 1010])
    t.equal(pages, 4, 'the third page is full, so a fourth (empty) page ends it')
  })

  t.test('pagination: defaults and a short page', async (t) => {
    const res = await route.get('/webhooks/batches', AUTH)
    t.equal(res.statusCode, 200)
    t.same(res.body.pagination, { limit: 500, offset: 0, nextOffset: null })
    t.equal(res.body.data.length, 12)
    t.equal(res.headers.link, undefined)
    t.equal(api.requests[0]!.query, '', 'defaults are not sent')
    const all = await route.get('/webhooks/batches?createdAfter=2026-01-18&createdBefore=2026-01-19T00:00:00Z&webhook=https%3A%2F%2Fhooks.example.com%2Fa&limit=2&offset=1', AUTH)
    t.same(all.body.data.map((b: { batchId: number }) => b.batchId), [1002, 1004])
    t.equal(all.headers.link, '</webhooks/batches?createdAfter=2026-01-18&createdBefore=2026-01-19T00%3A00%3A00Z&webhook=https%3A%2F%2Fhooks.example.com%2Fa&limit=2&offset=3>; rel="next"')
    t.equal(api.requests[1]!.query, 'created_after=2026-01-18&created_before=2026-01-19T00%3A00%3A00Z&webhook=https%3A%2F%2Fhooks.example.com%2Fa&limit=2&offset=1')
  })

  t.test('H8: client X-Api-Key and X-Customer-Handle are not forwarded', async (t) => {
    const res = await route.get('/webhooks/batches?limit=1', { ...AUTH, 'x-api-key': 'attacker', 'x-customer-handle': 'other', cookie: 'a=b' })
    t.equal(res.statusCode, 200)
    t.equal(api.requests.length, 1)
    const h = api.requests[0]!.headers
    t.equal(h['x-api-key'], FAKE_API_KEY, 'only the configured key')
    t.equal(h['x-customer-handle'], undefined, 'no customer handle')
    t.equal(h.authorization, undefined)
    t.equal(h.cookie, undefined)
    t.notMatch(JSON.stringify(res), FAKE_API_KEY)
  })

  t.test('H9: upstream redirect -> 502 application_error; the steal server receives nothing', async (t) => {
    const steal = await startStealServer()
    t.teardown(() => steal.close())
    api.queue.push(redirect(steal.url))
    const res = await route.get('/webhooks/batches', AUTH)
    checkErrorBody(t, res, 502, 'application_error')
    t.equal(res.headers.location, undefined)
    t.same(steal.hits, [])
  })

  t.test('H10: upstream 429 with a long Retry-After -> 503 rate_limit_error, one upstream call, headers not passed', async (t) => {
    api.always = reply(429, { message: 'slow down' }, { 'retry-after': '20', 'x-upstream-secret': 'leak' })
    const res = await routeNoRetry.get('/webhooks/batches', AUTH)
    checkErrorBody(t, res, 503, 'rate_limit_error')
    t.equal(api.requests.length, 1, 'no retry storm: Retry-After beyond maxRetryDelay')
    t.equal(res.headers['x-upstream-secret'], undefined)
    t.notMatch(res.body.message, 'slow down')
  })

  t.test('H10: retries are bounded (maxRetries 2 -> 3 upstream calls), then 503', async (t) => {
    api.always = reply(429, {})
    const res = await routeNoRetry.get('/webhooks/batches', AUTH)
    checkErrorBody(t, res, 503, 'rate_limit_error')
    t.equal(api.requests.length, 3)
  })

  t.test('H11: upstream 500 / 503 with HTML -> 503, body not echoed', async (t) => {
    const html = '<html><body>Internal details: db01.internal</body></html>'
    api.queue.push(reply(500, html))
    const a = await route.get('/webhooks/batches', AUTH)
    checkErrorBody(t, a, 503, 'internal_server_error')
    api.queue.push(reply(503, html))
    const b = await route.get('/webhooks/batches', AUTH)
    checkErrorBody(t, b, 503, 'api_error')
    for (const r of [a, b]) t.notMatch(JSON.stringify(r.body), 'db01')
  })

  t.test('H12: upstream 200 garbage -> 502', async (t) => {
    for (const body of ['<html>', '{}', '{"webhook_batches":"x"}', '{"webhook_batches":[', '{"webhook_batches":[{"batch_id":1}]}']) {
      api.queue.push(reply(200, body, { 'content-type': 'application/json' }))
      const res = await route.get('/webhooks/batches', AUTH)
      checkErrorBody(t, res, 502, 'api_error')
      t.equal(res.body.message, 'Listing webhook batches failed upstream.', body)
    }
  })

  t.test('H13: hang -> 504; reset mid-body -> 502; oversized -> 502', async (t) => {
    api.queue.push(hang)
    const a = await routeFast.get('/webhooks/batches', AUTH)
    checkErrorBody(t, a, 504, 'application_error')
    t.equal(a.body.message, 'The MailChannels API did not answer in time.')
    api.queue.push(resetMidBody)
    checkErrorBody(t, await route.get('/webhooks/batches', AUTH), 502, 'application_error')
    api.queue.push(huge(11 * 1024 * 1024))
    checkErrorBody(t, await route.get('/webhooks/batches', AUTH), 502, 'api_error')
  })

  t.test('H14: upstream 400 -> 502 invalid_request_error with a generic message', async (t) => {
    api.queue.push(reply(400, { errors: ['bad limit'] }))
    const res = await route.get('/webhooks/batches', AUTH)
    checkErrorBody(t, res, 502, 'invalid_request_error')
    t.equal(res.body.message, 'Listing webhook batches failed upstream.')
    t.notMatch(JSON.stringify(res.body), 'bad limit')
  })

  t.test('upstream 401 (API key refused) -> 502 authentication_error', async (t) => {
    const other = await mount(new MailChannels('not-the-right-key-xyz', { baseUrl: api.url }))
    const res = await other.get('/webhooks/batches', AUTH)
    checkErrorBody(t, res, 502, 'authentication_error')
    t.notMatch(JSON.stringify(res), 'not-the-right-key-xyz')
  })

  t.test('I2: logs record upstream failures and never the API key', async (t) => {
    api.queue.push(reply(400, { errors: [`echo ${FAKE_API_KEY}`] }))
    await route.get('/webhooks/batches', AUTH)
    const logs = all.map((r) => r.logs()).join('\n')
    t.match(logs, 'batches route: MailChannels API call failed')
    t.match(logs, 'invalid_request_error')
    t.notMatch(logs, FAKE_API_KEY)
    t.notMatch(logs, 'not-the-right-key-xyz')
  })
}
