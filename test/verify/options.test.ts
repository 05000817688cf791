import crypto from 'node:crypto'
import util from 'node:util'
import t from 'tap'
import { MailChannels, verifyWebhook } from '../../src/index.js'
import { assertRejected } from '../helpers/assert.js'
import { TEST_PUBLIC_KEY, TEST_PRIVATE_KEY_PEM, validDelivery } from '../helpers/sign.js'

// Verified at the time it was signed where a window is tested (maxAge: 1): a loaded machine can take
// more than a second between loading this file and a subtest.
const CREATED = Math.floor(Date.now() / 1000)
const d = validDelivery(undefined, CREATED)
const base = { payload: d.body, headers: d.headers, publicKey: TEST_PUBLIC_KEY }
const rsaPem = crypto.generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey.export({ format: 'pem', type: 'spki' }).toString()

const bad: Record<string, unknown[]> = {
  maxAge: [-1, 0, Number.NaN, Infinity, '300', null, 300_000, 86_401],
  clockSkew: [-1, Number.NaN, Infinity, '60', null, 60_000, 3_601],
  customerHandles: [[], [''], 'acct_1', [1], [null], {}, 42],
  keyIds: [[], ['bad id'], ['k'.repeat(65)], 'mckey', [''], [42]],
  maxEvents: [0, -1, 1.5, '10', Number.NaN, Infinity, 2 ** 60],
  cache: ['yes', 1, null],
  keyStore: [{}, 'store', 42],
  logger: [{}, 'console', 42],
  now: ['yesterday', Number.NaN, new Date('invalid'), () => 'x'],
}

for (const [option, values] of Object.entries(bad)) {
  t.test(`bad ${option} -> validation_error naming ${option}`, async (t) => {
    for (const value of values) {
      const r = await verifyWebhook({ ...base, [option]: value } as never)
      assertRejected(t, r, 'validation_error')
      t.match(r.error?.message, new RegExp(option), `${option}=${util.inspect(value)} named in "${r.error?.message}"`)
    }
  })
}

t.test('maxAge / clockSkew given in milliseconds by mistake: refused at start-up, the message names the unit', async (t) => {
  const r = await verifyWebhook({ ...base, maxAge: 300_000 })
  assertRejected(t, r, 'validation_error')
  t.equal(r.error?.message, 'maxAge is 300000 seconds, more than the 86400 s allowed: maxAge is in seconds, not milliseconds (300 s if 300000 was meant as milliseconds); the default is 300 s')
  const skew = await verifyWebhook({ ...base, clockSkew: 60_000 })
  t.match(skew.error?.message, /^clockSkew is 60000 seconds, more than the 3600 s allowed: clockSkew is in seconds, not milliseconds \(60 s if 60000 was meant as milliseconds\)/)
  // Too big to be milliseconds of an allowed value either: no guess offered.
  const huge = await verifyWebhook({ ...base, maxAge: 1e9 })
  t.match(huge.error?.message, /^maxAge is 1000000000 seconds, more than the 86400 s allowed: maxAge is in seconds, not milliseconds; the default is 300 s$/)
})

t.test('bad baseUrl -> validation_error naming baseUrl', async (t) => {
  const { publicKey: _, ...noKey } = base
  for (const baseUrl of [
    'http://example.com', // http, not loopback
    'http://10.0.0.1', // private but not loopback
    'http://127.0.0.1.evil.com', // looks like loopback
    'https://user:pw@api.mailchannels.net', // credentials
    'https://user@api.mailchannels.net',
    'https://api.mailchannels.net?x=1', // query
    'https://api.mailchannels.net/#frag', // fragment
    'ftp://api.mailchannels.net',
    'file:///etc/passwd',
    'not a url',
    '',
    42,
  ]) {
    const r = await verifyWebhook({ ...noKey, baseUrl } as never)
    assertRejected(t, r, 'validation_error')
    t.match(r.error?.message, /baseUrl/, `${util.inspect(baseUrl)}: ${r.error?.message}`)
    t.notOk(r.error?.message.includes('pw'), 'credentials not echoed')
  }
})

t.test('bad publicKey -> validation_error naming publicKey', async (t) => {
  for (const publicKey of [
    'garbage',
    'AAAA',
    '',
    rsaPem,
    TEST_PRIVATE_KEY_PEM, // a private key is not a public key, even though one can be derived from it
    'MCowBQYDK2VwAyEAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=', // small-order identity
    42,
    {},
    crypto.createPrivateKey(TEST_PRIVATE_KEY_PEM),
    crypto.generateKeyPairSync('x25519').publicKey,
    // a small-order key as a KeyObject must be refused like its string form (D4)
    crypto.createPublicKey({ key: Buffer.from('MCowBQYDK2VwAyEAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=', 'base64'), format: 'der', type: 'spki' }),
  ]) {
    const r = await verifyWebhook({ ...base, publicKey } as never)
    assertRejected(t, r, 'validation_error')
    t.match(r.error?.message, /publicKey/, `${util.inspect(publicKey).slice(0, 40)}: ${r.error?.message}`)
    t.notOk(r.error?.message.includes('MC4CAQAw'), 'no key material in the message')
  }
})

t.test('good options are accepted (boundaries)', async (t) => {
  for (const extra of [
    { maxAge: 1 },
    { maxAge: 0.5 + 300 },
    { maxAge: 86_400 },
    { clockSkew: 3_600 },
    { clockSkew: 0 },
    { maxEvents: 1 },
    { customerHandles: ['acct_1'] },
    { customerHandles: (h: string) => h.startsWith('acct_') },
    { keyIds: ['mckey', 'other'] },
    { baseUrl: 'http://localhost:1' },
    { baseUrl: 'http://[::1]:1/' },
    { baseUrl: 'https://api.mailchannels.net/' },
    { cache: false },
    { logger: { debug () {}, info () {}, warn () {}, error () {} } },
  ]) {
    const r = await verifyWebhook({ ...base, now: CREATED * 1000, ...extra })
    t.equal(r.error, null, JSON.stringify(extra))
  }
  // a customerHandles predicate that returns a truthy non-boolean does not allow
  const r = await verifyWebhook({ ...base, customerHandles: (() => 'yes') as never })
  t.equal(r.error?.type, 'customer_not_allowed', 'only a literal true allows')
})

t.test('MailChannels without an API key throws a TypeError', async (t) => {
  for (const key of [undefined, '', '   ', 42, null, {}]) {
    t.throws(() => new MailChannels(key as never), { name: 'TypeError', message: /API key/ }, util.inspect(key))
  }
  t.throws(() => new MailChannels('k', { baseUrl: 'http://example.com' }), { name: 'TypeError', message: /baseUrl/ })
  t.throws(() => new MailChannels('k', { baseUrl: 'https://a:b@api.mailchannels.net' }), { name: 'TypeError', message: /baseUrl/ })
})

t.test('util.inspect / JSON.stringify / String of a MailChannels instance never contain the API key', async (t) => {
  const apiKey = 'mc_live_7f3a9c_SECRET_key'
  const client = new MailChannels(apiKey, { baseUrl: 'http://127.0.0.1:1' })
  const renderings = [
    util.inspect(client),
    util.inspect(client, { showHidden: true, depth: 10, getters: true }),
    util.inspect(client, { customInspect: false, showHidden: true, depth: 10 }),
    util.format('%o %O %j %s', client, client, client, client),
    JSON.stringify(client),
    JSON.stringify({ nested: [client] }),
    String(client),
    `${Object.keys(client).join(',')} ${Object.getOwnPropertyNames(client).join(',')}`,
    JSON.stringify(Object.entries(client)),
    util.inspect(client.webhooks, { showHidden: true, depth: 10 }),
  ]
  for (const text of renderings) t.notOk(text.includes(apiKey) || text.includes('SECRET'), `no key in: ${text.slice(0, 80)}`)
  // a verify failure from the client does not carry it either
  const r = await client.webhooks.verify({ payload: 'x', headers: {} })
  t.notOk(JSON.stringify(r).includes('SECRET'))
})

t.test('customerHandles with an undefined or empty element names it and says an environment variable may be unset', async (t) => {
  // What `customerHandles: [process.env.MAILCHANNELS_CUSTOMER_HANDLE]` gives when the variable is unset or empty.
  for (const [handles, index, what] of [[[undefined], 0, 'undefined'], [['acct_1', ''], 1, 'an empty string']] as const) {
    const r = await verifyWebhook({ ...base, customerHandles: handles })
    t.equal(r.error?.type, 'validation_error')
    t.match(r.error?.message, `customerHandles[${index}] is ${what}`)
    t.match(r.error?.message.replace(/\s+/g, " "), /environment variable, that variable may be unset or empty/)
  }
})
