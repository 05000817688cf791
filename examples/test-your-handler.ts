// Testing your own webhook handler without MailChannels and without a network:
// sign deliveries with a test key, inject them, assert. `npx tsx examples/test-your-handler.ts`
// (Put the same steps in your test runner: node:test, tap, vitest, ...)
import assert from 'node:assert/strict'
import Fastify from 'fastify'
import mailchannelsWebhooks from 'mailchannels-webhooks/fastify'
import { generateSigningKeyPair, signWebhook } from 'mailchannels-webhooks/testing'

// Your app, built so a test can pass the public key (production leaves it out and fetches it).
async function buildApp (publicKey?: string) {
  const suppressed: string[] = []
  const app = Fastify()
  await app.register(mailchannelsWebhooks, { customerHandles: ['acme'], publicKey })
  app.post('/webhooks', { config: { mailchannelsWebhooks: true } }, async (request) => {
    for (const e of request.webhookEvents) if (e.event === 'hard-bounced') suppressed.push(...(e.recipients ?? []))
    return { ok: true }
  })
  return { app, suppressed }
}

const keys = generateSigningKeyPair()
const { app, suppressed } = await buildApp(keys.publicKey)
const bounce = { event: 'hard-bounced', customer_handle: 'acme', timestamp: Math.floor(Date.now() / 1000), recipients: ['gone@example.net'], status: '5.1.1', reason: 'User does not exist' }

// 1. A correctly signed delivery reaches the handler.
const signed = signWebhook({ events: [bounce], privateKey: keys.privateKey })
const ok = await app.inject({ method: 'POST', url: '/webhooks', headers: signed.headers, payload: signed.body })
assert.equal(ok.statusCode, 200)
assert.deepEqual(suppressed, ['gone@example.net'])
console.log('ok - a signed hard bounce suppresses the recipient')

// 2. A body changed after signing never reaches it.
const forged = await app.inject({ method: 'POST', url: '/webhooks', headers: signed.headers, payload: signed.body.toString().replace('gone@', 'ceo@') })
assert.equal(forged.statusCode, 401)
assert.equal(forged.json().code, 'digest_mismatch')
assert.deepEqual(suppressed, ['gone@example.net'])
console.log('ok - a tampered body is rejected with 401 digest_mismatch')

// 3. Another customer's delivery is refused, even correctly signed.
const other = signWebhook({ events: [{ ...bounce, customer_handle: 'someone-else' }], privateKey: keys.privateKey })
const refused = await app.inject({ method: 'POST', url: '/webhooks', headers: other.headers, payload: other.body })
assert.equal(refused.statusCode, 403)
console.log('ok - another customer_handle is rejected with 403')

// 4. An exact resend is answered without running the handler again (replay protection).
const again = await app.inject({ method: 'POST', url: '/webhooks', headers: signed.headers, payload: signed.body })
assert.deepEqual(again.json(), { duplicate: true })
assert.equal(suppressed.length, 1)
console.log('ok - a replayed delivery does not run the handler twice')

await app.close()
