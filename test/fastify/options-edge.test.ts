// Option values at the edges: fractional windows must not break the
// replay store (which keeps whole seconds), and `cache: false` is refused by the receivers.
import Fastify from 'fastify'
import t from 'tap'
import mailchannelsWebhooks from '../../src/fastify/index.js'
import { mailchannelsWebhooks as expressWebhooks } from '../../src/express/index.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'

const keys = generateSigningKeyPair()
const body = '[{"event":"delivered","customer_handle":"acct_1","timestamp":1700000000}]'

for (const opts of [{ maxAge: 299.5 }, { clockSkew: 0.5 }]) {
  t.test(`a fractional window (${JSON.stringify(opts)}) still accepts a valid delivery`, async (t) => {
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(mailchannelsWebhooks, { publicKey: keys.publicKey, customerHandles: ['acct_1'], ...opts })
    let handled = 0
    app.post('/hook', { config: { mailchannelsWebhooks: true } }, async (request) => {
      handled++
      return { received: request.webhookEvents.length }
    })
    const d = signWebhook({ payload: body, privateKey: keys.privateKey })
    const res = await app.inject({ method: 'POST', url: '/hook', payload: d.body, headers: d.headers })
    t.equal(res.statusCode, 200)
    t.same(res.json(), { received: 1 })
    const again = await app.inject({ method: 'POST', url: '/hook', payload: d.body, headers: d.headers })
    t.same(again.json(), { duplicate: true }, 'and the replay store still works')
    t.equal(handled, 1)
  })
}

t.test('cache: false is refused by the plugin and the middleware (no budget without a cache)', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  app.register(mailchannelsWebhooks, { customerHandles: ['acct_1'], cache: false })
  await t.rejects(async () => { await app.ready() }, /cache: false/)
  t.throws(() => expressWebhooks({ customerHandles: ['acct_1'], cache: false }), /cache: false/)
  t.doesNotThrow(() => expressWebhooks({ customerHandles: ['acct_1'], cache: false, publicKey: keys.publicKey }), 'fine with a static key')
})
