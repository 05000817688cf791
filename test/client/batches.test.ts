import t from 'tap'
import { MailChannels, type BatchesOptions } from '../../src/index.js'
import { USER_AGENT } from '../../src/client/http.js'
import { CLIENT_VERSION } from '../../src/client/version.js'
import { FAKE_API_KEY, useFakeApi, type FakeApi } from '../helpers/fake-api.js'
import { readFileSync } from 'node:fs'

let api: FakeApi
let client: MailChannels
const fake = useFakeApi(t)
t.before(() => {
  api = fake.api
  client = new MailChannels(FAKE_API_KEY, { baseUrl: api.url })
})

t.test('query encoding on the wire (raw query strings)', async (t) => {
  const cases: Array<[string, BatchesOptions | undefined, string]> = [
    ['no options: no query', undefined, ''],
    ['empty object: no query', {}, ''],
    ['statuses as ONE comma-separated parameter', { statuses: ['4xx', '5xx', 'no_response'] }, 'statuses=4xx%2C5xx%2Cno_response'],
    ['an empty statuses list sends nothing', { statuses: [] }, ''],
    ['date-only strings verbatim', { createdAfter: '2026-01-01', createdBefore: '2026-01-05' }, 'created_after=2026-01-01&created_before=2026-01-05'],
    ['date-time strings verbatim', { createdAfter: '2026-01-01T10:00:00Z', createdBefore: '2026-01-02T00:00:00Z' }, 'created_after=2026-01-01T10%3A00%3A00Z&created_before=2026-01-02T00%3A00%3A00Z'],
    ['Date input in UTC without milliseconds', { createdAfter: new Date('2026-01-01T14:00:00.789+02:00'), createdBefore: new Date(Date.UTC(2026, 0, 3)) }, 'created_after=2026-01-01T12%3A00%3A00Z&created_before=2026-01-03T00%3A00%3A00Z'],
    ['webhook percent-encoded', { webhook: 'https://x.test/h?a=b&c=d' }, 'webhook=https%3A%2F%2Fx.test%2Fh%3Fa%3Db%26c%3Dd'],
    ['limit and offset', { limit: 10, offset: 0 }, 'limit=10&offset=0'],
    ['everything, in a fixed order', { offset: 5, limit: 2, webhook: 'https://hooks.example.com/a', statuses: ['2xx'], createdBefore: '2026-01-19', createdAfter: '2026-01-18' },
      'created_after=2026-01-18&created_before=2026-01-19&statuses=2xx&webhook=https%3A%2F%2Fhooks.example.com%2Fa&limit=2&offset=5'],
  ]
  for (const [name, options, query] of cases) {
    api.requests.length = 0
    const r = await client.webhooks.batches(options)
    t.equal(r.error, null, `${name}: no error`)
    t.equal(api.requests.length, 1, `${name}: one request`)
    t.equal(api.requests[0]!.url, `/tx/v1/webhook-batch${query === '' ? '' : `?${query}`}`, name)
  }
})

t.test('headers: API key, accept, user-agent; GET; nothing else of note', async (t) => {
  await client.webhooks.batches()
  const req = api.requests[0]!
  t.equal(req.method, 'GET')
  t.equal(req.headers['x-api-key'], FAKE_API_KEY)
  t.equal(req.headers.accept, 'application/json')
  t.equal(req.headers['user-agent'], `mailchannels-webhooks/${CLIENT_VERSION}`)
  t.equal(USER_AGENT, `mailchannels-webhooks/${CLIENT_VERSION}`)
  t.equal(req.headers['x-customer-handle'], undefined)
  t.equal(CLIENT_VERSION, JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version, 'version matches package.json')
})

t.test('response mapped to camelCase, with the fake filtering for real', async (t) => {
  const r = await client.webhooks.batches({ statuses: ['4xx', 'no_response'], limit: 2 })
  t.equal(r.error, null)
  t.same(r.data, [
    { batchId: 1001, createdAt: '2026-01-18T04:00:00.000Z', customerHandle: 'acme', duration: { unit: 'milliseconds', value: 10 }, eventCount: 2, status: '4xx_response', statusCode: 404, webhook: 'https://hooks.example.com/b?token=t' },
    { batchId: 1003, createdAt: '2026-01-18T12:00:00.000Z', customerHandle: 'acme', duration: { unit: 'milliseconds', value: 30 }, eventCount: 4, status: 'no_response', statusCode: null, webhook: 'https://hooks.example.com/b?token=t' },
  ])
  const all = await client.webhooks.batches({ createdAfter: '2026-01-19', createdBefore: '2026-01-19T08:00:00Z' })
  t.same(all.data?.map((b) => b.batchId), [1006, 1007])
  const byHook = await client.webhooks.batches({ webhook: 'https://hooks.example.com/a', offset: 4 })
  t.same(byHook.data?.map((b) => b.batchId), [1008, 1010])
})

t.test('optional fields: duration absent, status_code absent -> null', async (t) => {
  api.batches.push({ batch_id: 5000, created_at: '2026-01-19T23:00:00Z', customer_handle: 'acme', event_count: 0, status: '2xx_response', webhook: 'https://x' } as never)
  t.teardown(() => { api.batches.pop() })
  const r = await client.webhooks.batches({ createdAfter: '2026-01-19T22:00:00Z', createdBefore: '2026-01-20' })
  t.same(r.data, [{ batchId: 5000, createdAt: '2026-01-19T23:00:00Z', customerHandle: 'acme', eventCount: 0, status: '2xx_response', statusCode: null, webhook: 'https://x' }])
  t.notOk('duration' in r.data![0]!, 'no duration key')
})

t.test('validation: each failure is validation_error naming the option, with 0 HTTP calls', async (t) => {
  const invalidStatus = "statuses: Invalid status filter provided. Valid values are: '1xx', '2xx', '3xx', '4xx', '5xx', 'no_response'."
  const afterMsg = "The 'createdAfter' value is not a valid date. Use YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ (UTC) or a Date."
  const beforeMsg = "The 'createdBefore' value is not a valid date. Use YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ (UTC) or a Date."
  const limitMsg = 'The limit value must be an integer between 1 and 500.'
  const offsetMsg = 'The offset value must be an integer greater than or equal to 0.'
  const cases: Array<[string, unknown, string]> = [
    ['limit 0', { limit: 0 }, limitMsg],
    ['limit 501', { limit: 501 }, limitMsg],
    ['limit 1.5', { limit: 1.5 }, limitMsg],
    ['limit NaN', { limit: Number.NaN }, limitMsg],
    ['limit as string', { limit: '10' }, limitMsg],
    ['offset -1', { offset: -1 }, offsetMsg],
    ['offset 0.5', { offset: 0.5 }, offsetMsg],
    ['offset NaN', { offset: Number.NaN }, offsetMsg],
    ['offset Infinity', { offset: Infinity }, offsetMsg],
    ['statuses not an array', { statuses: '4xx' }, 'The statuses value must be an array of status filters.'],
    ['7 statuses', { statuses: ['1xx', '2xx', '3xx', '4xx', '5xx', 'no_response', '2xx'] }, 'statuses: A maximum of 6 status filters can be provided.'],
    ['duplicate statuses', { statuses: ['2xx', '2xx'] }, 'statuses: Status filters must be unique.'],
    ['unknown status 6xx', { statuses: ['6xx'] }, invalidStatus],
    ['response-style status', { statuses: ['4xx_response'] }, invalidStatus],
    ['createdAfter not-a-date', { createdAfter: 'not-a-date' }, afterMsg],
    ['createdAfter free-form', { createdAfter: 'January 01, 2026' }, afterMsg],
    ['createdAfter empty', { createdAfter: '' }, afterMsg],
    ['createdAfter 2026-02-30', { createdAfter: '2026-02-30' }, afterMsg],
    ['createdAfter 2026-13-01', { createdAfter: '2026-13-01' }, afterMsg],
    ['createdAfter 2026-01-32', { createdAfter: '2026-01-32' }, afterMsg],
    ['createdAfter with milliseconds', { createdAfter: '2026-01-01T00:00:00.000Z' }, afterMsg],
    ['createdAfter with an offset', { createdAfter: '2026-01-01T00:00:00+02:00' }, afterMsg],
    ['createdAfter hour 24', { createdAfter: '2026-01-01T24:00:00Z' }, afterMsg],
    ['createdAfter invalid Date', { createdAfter: new Date('x') }, afterMsg],
    ['createdAfter a number', { createdAfter: 1767225600000 }, afterMsg],
    ['createdBefore 2026-13-01T12:00:00Z', { createdBefore: '2026-13-01T12:00:00Z' }, beforeMsg],
    ['createdBefore == createdAfter', { createdAfter: '2026-01-01', createdBefore: '2026-01-01T00:00:00Z' }, 'createdBefore must be later than createdAfter.'],
    ['createdBefore < createdAfter', { createdAfter: '2024-07-29', createdBefore: '2024-07-28' }, 'createdBefore must be later than createdAfter.'],
    ['range > 31 days', { createdAfter: '2024-07-01', createdBefore: '2024-08-02' }, 'The time range between createdAfter and createdBefore must not exceed 31 days.'],
    ['range 31 days + 1 s', { createdAfter: '2026-01-01', createdBefore: '2026-02-01T00:00:01Z' }, 'The time range between createdAfter and createdBefore must not exceed 31 days.'],
    ['webhook empty', { webhook: '' }, 'The webhook value must be a non-empty string of at most 2048 characters.'],
    ['webhook not a string', { webhook: 42 }, 'The webhook value must be a non-empty string of at most 2048 characters.'],
    ['unknown option (snake_case)', { created_after: '2026-01-01' }, "Unknown option 'created_after'. Valid options are: createdAfter, createdBefore, statuses, webhook, limit, offset."],
    ['options not an object', 'limit=1', 'batches options must be an object.'],
  ]
  for (const [name, options, message] of cases) {
    const r = await client.webhooks.batches(options as BatchesOptions)
    t.same(r, { data: null, error: { message, statusCode: null, type: 'validation_error', response: null } }, name)
  }
  t.equal(api.requests.length, 0, 'no HTTP call for any of them')
})

t.test('edge values that pass', async (t) => {
  const ok: BatchesOptions[] = [
    { limit: 1 }, { limit: 500 }, { offset: 0 },
    { createdAfter: '2026-01-01', createdBefore: '2026-02-01' }, // exactly 31 days
    { createdAfter: '2024-02-29' }, // leap day
    { statuses: ['1xx', '2xx', '3xx', '4xx', '5xx', 'no_response'] },
  ]
  for (const o of ok) {
    const r = await client.webhooks.batches(o)
    t.equal(r.error, null, JSON.stringify(o))
  }
  t.equal(api.requests.length, ok.length)
})
