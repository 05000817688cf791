import t from 'tap'
import { MailChannels } from '../../src/index.js'
import { linkPath } from '../../src/batches-route/core.js'
import { FAKE_API_KEY, useFakeApi, type FakeApi } from '../helpers/fake-api.js'
import { frameworks, parseLinkHeader, rawGet, type Served } from './helpers/servers.js'

// The pagination Link under a parameterised mount (Express `app.use('/t/:tenant', ...)`,
// Fastify `prefix: '/t/:tenant'`) with request paths Node's parser accepts: `< > " ; , \`
// and absolute-form targets. A frontend following rel="next" with its Authorization header
// must stay on this origin, and on the tenant it asked for.

const TOKEN = 'link-token'
const AUTH = { authorization: `Bearer ${TOKEN}` }

const seen: string[] = []
function authorize (req: { headers: Record<string, string | string[] | undefined>, params?: unknown }): boolean {
  const tenant = (req.params as { tenant?: unknown } | undefined)?.tenant
  seen.push(typeof tenant === 'string' ? tenant : '(none)')
  return req.headers.authorization === `Bearer ${TOKEN}`
}

// The tenant segment as sent on the wire; each is a single path segment Node accepts.
const TENANTS = [
  'acme',
  '>;rel=prev,<\\\\evil.example\\p',
  '<evil.example>;rel=next,<',
  'a;b,c"d\'e',
  'x%20y',
  '@evil.example',
  '..',
]

for (const fw of frameworks) {
  t.test(fw.name, async (t) => {
    let api: FakeApi
    let route: Served
    const fake = useFakeApi(t)
    t.before(async () => {
      api = fake.api
      route = await fw.start({ client: new MailChannels(FAKE_API_KEY, { baseUrl: api.url, maxRetries: 0 }), authorize, mount: '/t/:tenant' })
    })
    t.teardown(async () => {
      await route.close()
    })

    for (const tenant of TENANTS) {
      t.test(`tenant segment ${JSON.stringify(tenant)}: one same-origin rel="next" that reaches the same tenant`, async (t) => {
        seen.length = 0
        const res = await rawGet(route.port, `/t/${tenant}/webhooks/batches?limit=2`, AUTH)
        t.equal(res.status, 200)
        const header = res.headers.link
        t.type(header, 'string')
        t.match(header, /^<\/[A-Za-z0-9\-._~/:@%]*\?[^<>\s"\\]*>; rel="next"$/, 'the target uses only allowlisted characters')
        const links = parseLinkHeader(header!)
        t.equal(links.length, 1, 'exactly one link-value')
        const nexts = links.filter((l) => l.rel.includes('next'))
        t.equal(nexts.length, 1, 'one rel="next"')
        const target = nexts.at(-1)!.target
        t.notMatch(target, /^\/\//, 'no leading //')
        const resolved = new URL(target, route.base)
        t.equal(resolved.origin, route.base, 'resolves to this origin')
        t.equal(resolved.search, '?limit=2&offset=2')
        // Follow it as sent: the same route answers, for the same tenant.
        const next = await rawGet(route.port, target, AUTH)
        t.equal(next.status, 200)
        t.same(JSON.parse(next.body).pagination, { limit: 2, offset: 2, nextOffset: 4 })
        t.equal(seen.length, 2)
        t.equal(seen[1], seen[0], 'the link carries the real path: same tenant')
        t.not(seen[0], ':tenant')
      })
    }

    t.test('an absolute-form request target: the link is a same-origin path', async (t) => {
      seen.length = 0
      const res = await rawGet(route.port, 'http://evil.example/t/acme/webhooks/batches?limit=2', AUTH)
      t.equal(res.status, 200)
      const links = parseLinkHeader(res.headers.link ?? '')
      t.equal(links.length, 1)
      t.equal(links[0]!.target, '/t/acme/webhooks/batches?limit=2&offset=2')
      t.equal(new URL(links[0]!.target, route.base).origin, route.base)
      t.same(seen, ['acme'])
    })
  })
}

t.test('linkPath: percent-encodes outside a strict allowlist and never starts with //', async (t) => {
  const cases: Array<[string, string]> = [
    ['/webhooks/batches', '/webhooks/batches'],
    ['/t/acme/webhooks/batches', '/t/acme/webhooks/batches'],
    ['/t/>;rel=prev,<\\\\evil.example\\p/x', '/t/%3E%3Brel%3Dprev%2C%3C%5C%5Cevil.example%5Cp/x'],
    ['//evil.example/x', '/evil.example/x'],
    ['///evil.example/x', '/evil.example/x'],
    ['/\\evil.example/x', '/%5Cevil.example/x'],
    ['/a%2Fb/x', '/a%2Fb/x'],
    ['/a%2fb%zz%/x', '/a%2fb%25zz%25/x'],
    ['/a b"\'`{}|^[]$&+!*()=', '/a%20b%22%27%60%7B%7D%7C%5E%5B%5D%24%26%2B%21%2A%28%29%3D'],
    ['/caf\u00e9', '/caf%E9'], // Node hands over raw bytes as latin1 characters
    ['/\u20ac\ud800', '/%E2%82%AC%EF%BF%BD'], // characters above 0xff (set by code): UTF-8, lone surrogates replaced
    ['/x\r\n\tSet-Cookie: a', '/x%0D%0A%09Set-Cookie:%20a'],
    ['http://evil.example/t/x/y', '/t/x/y'],
    ['HTTPS://evil.example', '/'],
    ['http://evil.example//x', '/x'],
    ['*', '/%2A'],
    ['', '/'],
    ['relative/path', '/relative/path'],
  ]
  for (const [input, expected] of cases) {
    const out = linkPath(input)
    t.equal(out, expected, JSON.stringify(input))
    t.equal(new URL(out, 'http://127.0.0.1:1').origin, 'http://127.0.0.1:1', `${JSON.stringify(input)}: same origin`)
  }
})
