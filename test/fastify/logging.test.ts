import Fastify from 'fastify'
import pino from 'pino'
import t from 'tap'
import plugin from '../../src/fastify/index.js'
import { closedPort, delivery, event, failingStore, HANDLE, KEYS, logCapture, OTHER_KEYS } from './helpers/fixtures.js'

const API_KEY = 'mc_api_key_SECRET_0123456789'
const SECRET_EMAIL = 'very-private-recipient@example.com'

t.test('one log line per rejection with reason and keyid; never the signature, body or an API key', async (t) => {
  const logs = logCapture()
  const port = await closedPort()
  const app = Fastify({ loggerInstance: pino({ level: 'debug' }, logs.stream) })
  await app.register(plugin, { publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: false })
  app.post('/wh', { config: { mailchannelsWebhooks: true } }, async () => ({}))
  app.post('/down', { config: { mailchannelsWebhooks: { publicKey: undefined, baseUrl: `http://127.0.0.1:${port}` } } }, async () => ({}))
  app.post('/store', { config: { mailchannelsWebhooks: { replay: failingStore() } } }, async () => ({}))
  t.teardown(() => app.close())

  const good = delivery({ events: [event({ email: SECRET_EMAIL })] })
  const forged = delivery({ events: [event({ email: SECRET_EMAIL })], privateKey: OTHER_KEYS.privateKey })
  const other = delivery({ events: [event({ email: SECRET_EMAIL, customer_handle: 'acct_other' })] })
  const extra = { 'x-api-key': API_KEY, authorization: `Bearer ${API_KEY}` }
  const sent: Array<[string, Record<string, string>, Buffer, number, string]> = [
    ['/wh', { ...forged.headers, ...extra }, forged.body, 401, 'signature_invalid'],
    ['/wh', { ...good.headers, ...extra }, Buffer.from(good.body.toString().replace('delivered', 'dropped')), 401, 'digest_mismatch'],
    ['/wh', { ...other.headers, ...extra }, other.body, 403, 'customer_not_allowed'],
    ['/wh', { ...good.headers, ...extra, 'content-encoding': 'gzip' }, good.body, 415, 'unsupported_media_type'],
    ['/down', { ...good.headers, ...extra }, good.body, 503, 'key_unavailable'],
    ['/store', { ...good.headers, ...extra }, good.body, 503, 'replay_store_unavailable'],
  ]
  for (const [url, headers, payload, status] of sent) {
    t.equal((await app.inject({ method: 'POST', url, headers, payload })).statusCode, status, url)
  }
  const rejections = logs.lines().filter((l) => l.msg === 'mailchannels webhook rejected')
  t.same(rejections.map((l) => l.reason), sent.map((s) => s[4]), 'one line per rejection, in order')
  t.same(rejections.map((l) => l.level), [30, 30, 30, 30, 40, 40], '4xx at info, 503 at warn')
  t.ok(rejections.slice(0, 3).every((l) => l.keyId === 'mckey'), 'keyid when parsed')
  t.equal(rejections[5]!.cause, 'ECONNREFUSED 127.0.0.1:6379', "the replay store's own error, so an operator sees why it answered 503")
  t.same(rejections.slice(0, 5).map((l) => l.cause), [undefined, undefined, undefined, undefined, undefined], 'no cause where there is none')
  const text = logs.text()
  const sigValue = forged.headers.signature.split(':')[1]!
  t.notOk(text.includes(sigValue), 'no signature')
  t.notOk(text.includes(good.headers.signature.split(':')[1]!), 'no signature')
  t.notOk(text.includes(SECRET_EMAIL), 'no body content')
  t.notOk(text.includes(API_KEY), 'no API key')
  t.notOk(text.includes(KEYS.publicKey), 'no key material')
})
