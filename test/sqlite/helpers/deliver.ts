// A signed delivery of `events` to the fetch receiver (`createWebhookHandler`) around `router`, in
// this process: the HTTP status and Retry-After a sender would see.
import { signWebhook, generateSigningKeyPair } from '../../../src/testing/index.js'
import { createWebhookHandler } from '../../../src/web/index.js'
import type { WebhookEventRouter } from '../../../src/index.js'

const KEYS = generateSigningKeyPair()
let copy = 0

/** The wire form of `count` hard-bounced events, `k` making them distinct. */
export const wire = (k: number, count = 1): Array<Record<string, unknown>> => Array.from({ length: count }, (_, i) => ({ event: 'hard-bounced', customer_handle: 'acct_1', timestamp: 1700000000 + k, request_id: `req-${k}-${i}`, email: `u${i}@example.com` }))

export function receiverOf (router: WebhookEventRouter<object, any>): (events: Array<Record<string, unknown>>) => Promise<{ status: number, retryAfter: string | null }> {
  const handler = createWebhookHandler({ publicKey: KEYS.publicKey, customerHandles: ['acct_1'], handlers: router })
  return async (events) => {
    const signed = signWebhook({ privateKey: KEYS.privateKey, events: events as never, label: `sig_${copy++}` })
    const res = await handler(new Request('http://127.0.0.1/', { method: 'POST', headers: signed.headers, body: signed.body }))
    await res.arrayBuffer()
    return { status: res.status, retryAfter: res.headers.get('retry-after') }
  }
}
