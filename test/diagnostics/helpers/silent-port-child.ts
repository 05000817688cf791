// Run with --conditions=mcwh-web-source (#diagnostics → the silent port, as on Workers): a
// subscriber is there, a delivery is handled, and nothing is published. Prints a JSON line.
import diagnosticsChannel from 'node:diagnostics_channel'
import { DELIVERY_DIAGNOSTICS_CHANNEL, RECEIVE_TRACING_CHANNEL } from '../../../src/index.js'
import { generateSigningKeyPair, signWebhook } from '../../../src/testing/index.js'
import { createWebhookHandler } from '../../../src/web/index.js'

const messages: unknown[] = []
diagnosticsChannel.subscribe(DELIVERY_DIAGNOSTICS_CHANNEL, (m) => { messages.push(m) })
diagnosticsChannel.tracingChannel(RECEIVE_TRACING_CHANNEL).subscribe({ start: (c) => { messages.push(c) }, end () {}, asyncStart () {}, asyncEnd () {}, error () {} })
const keys = generateSigningKeyPair()
const signed = signWebhook({ events: [{ event: 'delivered', customer_handle: 'acct_w', timestamp: 1700000000 }], privateKey: keys.privateKey })
const handler = createWebhookHandler({ publicKey: keys.publicKey, customerHandles: ['acct_w'], onEvents: () => {} })
const status = (await handler(new Request('http://127.0.0.1/hook', { method: 'POST', headers: signed.headers, body: signed.body }))).status
process.stdout.write(JSON.stringify({ status, messages: messages.length }))
