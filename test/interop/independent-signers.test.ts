// Interop: deliveries signed by code we did not write verify with this library, and
// deliveries from our test kit verify with the other implementations. This is where
// http-message-signatures serves (docs/design-notes.md): an independent RFC 9421 signer.
import crypto from 'node:crypto'
import t from 'tap'
import { httpbis, createSigner, createVerifier } from 'http-message-signatures'
import { Webhooks as SdkWebhooks } from 'mailchannels-sdk'
import { verifyWebhook } from '../../src/index.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'

const keys = generateSigningKeyPair()
const body = JSON.stringify([{ event: 'delivered', customer_handle: 'acct_1', timestamp: 1700000000, request_id: 'r1' }])
const contentDigest = `sha-256=:${crypto.createHash('sha256').update(body).digest('base64')}:`

async function signWithLibrary (params: string[], created: Date): Promise<Record<string, string>> {
  const signed = await httpbis.signMessage({
    key: createSigner(keys.privateKey, 'ed25519', 'mckey'),
    name: 'sig_1',
    fields: ['content-digest'],
    params,
    paramValues: { created },
  }, { method: 'POST', url: 'https://receiver.example/webhooks', headers: { 'content-digest': contentDigest } })
  return signed.headers as Record<string, string>
}

t.test('a delivery signed by http-message-signatures verifies, whatever its parameter order', async (t) => {
  const created = new Date()
  for (const params of [['created', 'alg', 'keyid'], ['keyid', 'alg', 'created'], ['created', 'keyid']]) {
    const headers = await signWithLibrary(params, created)
    const result = await verifyWebhook({ payload: body, headers, publicKey: keys.publicKey, customerHandles: ['acct_1'] })
    t.same(result, { data: [{ event: 'delivered', customerHandle: 'acct_1', timestamp: 1700000000, requestId: 'r1' }], error: null }, params.join(','))
  }
})

t.test('the same delivery with the body changed after signing is rejected', async (t) => {
  const headers = await signWithLibrary(['created', 'alg', 'keyid'], new Date())
  const result = await verifyWebhook({ payload: body.replace('delivered', 'complained'), headers, publicKey: keys.publicKey })
  t.equal(result.error?.type, 'digest_mismatch')
})

t.test('signWebhook output verifies with http-message-signatures and with mailchannels-sdk', async (t) => {
  const { body: signedBody, headers } = signWebhook({ payload: body, privateKey: keys.privateKey, keyId: 'mckey' })
  const ok = await httpbis.verifyMessage({
    keyLookup: async () => ({ id: 'mckey', algs: ['ed25519'], verify: createVerifier(crypto.createPublicKey({ key: Buffer.from(keys.publicKey, 'base64'), format: 'der', type: 'spki' }), 'ed25519') }),
    requiredFields: ['content-digest'],
    maxAge: 300,
  }, { method: 'POST', url: 'https://receiver.example/webhooks', headers })
  t.equal(ok, true, 'http-message-signatures accepts it')
  const sdk = await SdkWebhooks.verify({ payload: signedBody.toString('utf8'), headers, publicKey: keys.publicKey })
  t.equal(sdk, true, 'mailchannels-sdk accepts it')
})
