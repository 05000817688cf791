// The request pipeline (src/receiver/pipeline.ts) on its own, without a framework: a tiny port of
// plain objects, real signed deliveries, the real MemoryReplayStore. The adapters' suites
// (test/express, test/fastify, test/web, test/hono, test/receivers-dispatch) check the same
// behaviour through each framework; these check the pipeline that all of them share.
import t from 'tap'
import { WebhookEventRouter } from '../../src/index.js'
import { MemoryReplayStore } from '../../src/replay/memory-store.js'
import { createWebhookPipeline, type AcceptedOutcome, type SettleHandler, type WebhookPort } from '../../src/receiver/index.js'
import { tooLargeMessage } from '../../src/receiver/transport.js'
import type { WebhookReceiverOptions } from '../../src/receiver/options.js'
import type { Reply } from '../../src/receiver/reply.js'
import { generateSigningKeyPair, signWebhook, type SignedWebhook } from '../../src/testing/index.js'
import { recordingLogger } from '../fastify/helpers/fixtures.js'

const KEYS = generateSigningKeyPair()
const HANDLE = 'acct_1'
let serial = 0

function delivery (types: readonly string[] = ['delivered']): SignedWebhook {
  const id = ++serial
  const events = types.map((event, i) => ({ event, customer_handle: HANDLE, timestamp: 1700000000 + i, request_id: `req-${id}-${i}`, email: `person${i}@example.net` }))
  return signWebhook({ privateKey: KEYS.privateKey, events })
}

/** The replay id of a delivery, as the receiver derives it (the signature bytes). */
async function idOf (d: SignedWebhook): Promise<string> {
  const { deliveryId } = await import('../../src/replay/types.js')
  const value = d.headers.signature
  return deliveryId(Buffer.from(value.slice(value.indexOf('=:') + 2, -1), 'base64'))
}

/** One request: its delivery, and what the pipeline did with it. */
interface Ctx {
  d: SignedWebhook
  headers?: Record<string, string>
  /** What the body port hands over instead of the delivery's bytes (a function may throw). */
  body?: Uint8Array | (() => Uint8Array)
  reads: number
  replies: Reply[]
  ran: AcceptedOutcome[]
}

/** What the application's handler does in a test. */
type Handler = (ctx: Ctx, outcome: AcceptedOutcome, settle: SettleHandler) => string | Promise<string>

function setup (options: Partial<WebhookReceiverOptions> = {}, handler: Handler = (_c, o, settle) => { settle(o, 200); return 'ran' }) {
  const { logger, entries } = recordingLogger()
  const io: WebhookPort<Ctx, string> = {
    headers: (ctx) => ctx.headers ?? ctx.d.headers,
    readBody (ctx) {
      ctx.reads++
      if (ctx.body === undefined) return ctx.d.body
      return typeof ctx.body === 'function' ? ctx.body() : ctx.body
    },
    reply (ctx, reply) { ctx.replies.push(reply); return 'replied' },
    run (ctx, outcome, settle) { ctx.ran.push(outcome); return handler(ctx, outcome, settle) },
  }
  const flow = createWebhookPipeline<Ctx, string>({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], verifyOnThreadPool: false, logger, ...options }, io)
  const send = async (d: SignedWebhook, extra: Partial<Ctx> = {}): Promise<Ctx & { result: string }> => {
    const ctx: Ctx = { d, reads: 0, replies: [], ran: [], ...extra }
    const result = await flow.handle(ctx)
    return { ...ctx, result }
  }
  return { flow, send, entries }
}

t.test('a verified delivery runs the handler once; its 2xx completes the claim, so the identical resend is a duplicate', async (t) => {
  const { send } = setup({ replay: new MemoryReplayStore() })
  const d = delivery(['delivered', 'open'])
  const first = await send(d)
  t.equal(first.result, 'ran', 'the handler answered')
  t.same(first.ran[0]?.events.map((e) => e.event), ['delivered', 'open'], 'with the typed events')
  t.equal(first.ran[0]?.keyId, signWebhookKeyId(d))
  t.same(first.replies, [], 'the pipeline sent nothing itself')
  const again = await send(d)
  t.same(again.ran, [], 'the handler does not run for the resend')
  t.same(again.replies.map((r) => [r.status, r.body]), [[200, { duplicate: true }]])
})

t.test('a refused delivery is answered by the pipeline; the handler never runs', async (t) => {
  const { send, entries } = setup()
  const d = delivery()
  const forged = { ...d, body: Buffer.from(d.body.toString().replace('delivered', 'bounced')) }
  const res = await send(forged)
  t.same(res.ran, [])
  t.same(res.replies.map((r) => (r.body as { code: string }).code), ['digest_mismatch'])
  t.ok(entries.some((e) => e.msg === 'mailchannels webhook rejected' && (e.obj as { reason?: string }).reason === 'digest_mismatch'), 'logged once, with the reason')
})

t.test('the transport checks run before the body is read', async (t) => {
  const { send } = setup()
  const d = delivery()
  const res = await send(d, { headers: { ...d.headers, 'content-encoding': 'gzip' } })
  t.equal(res.reads, 0, 'the body was not read')
  t.equal(res.replies[0]?.status, 415)
  const big = await send(d, { headers: { ...d.headers, 'content-length': String(1024 * 1024 + 1) } })
  t.equal(big.reads, 0, 'a Content-Length over bodyLimit is refused unread')
  t.equal(big.replies[0]?.status, 413)
})

t.test('bodyLimit: a body port that returns more bytes than asked is refused 413 with the one message, before verification', async (t) => {
  const { send } = setup({ bodyLimit: 64 })
  const d = delivery()
  t.ok(d.body.length > 64)
  const res = await send(d)
  t.equal(res.reads, 1)
  t.same(res.ran, [], 'the handler does not run')
  t.equal(res.replies[0]?.status, 413)
  t.same(res.replies[0]?.body, { statusCode: 413, code: 'payload_too_large', error: 'Payload Too Large', message: tooLargeMessage(64) })
  t.equal(res.replies[0]?.headers.connection, 'close')
})

t.test('a body port that throws is answered with its error, never a crash', async (t) => {
  const { send } = setup()
  const res = await send(delivery(), { body: () => { throw new Error('socket hang up') } })
  t.equal(res.replies[0]?.status, 500, 'an unexpected error is a generic 500')
  t.equal((res.replies[0]?.body as { code: string }).code, 'configuration_error')
  t.notMatch(JSON.stringify(res.replies[0]?.body), /socket hang up/, 'no internals in the answer')
})

for (const [name, handler] of [
  ['throws', (): string => { throw new Error('db down') }],
  ['rejects', async (): Promise<string> => { throw new Error('db down') }],
] as const) {
  t.test(`a handler that ${name}: 500 handler_error, logged, and the claim released so the retry runs it again`, async (t) => {
    let calls = 0
    const { send, entries } = setup({ replay: new MemoryReplayStore() }, (ctx, o, settle) => { calls++; return calls === 1 ? handler() : (settle(o, 200), 'ran') })
    const d = delivery()
    const first = await send(d)
    t.equal(first.result, 'replied')
    t.same(first.replies.map((r) => [r.status, (r.body as { code: string }).code]), [[500, 'handler_error']])
    t.notMatch(JSON.stringify(first.replies[0]?.body), /db down/, 'the error stays out of the answer')
    t.ok(entries.some((e) => e.level === 'error' && e.msg === 'mailchannels webhook: the handler failed' && (e.obj as { err?: string }).err === 'db down'), 'and goes to the log')
    const retry = await send(d)
    t.equal(retry.result, 'ran', 'the retry of the released delivery runs the handler')
    t.equal(calls, 2)
  })
}

t.test('the handler settles with its own status: a non-2xx releases the claim, a later settle is ignored', async (t) => {
  const statuses = [503, 200]
  const { send } = setup({ replay: new MemoryReplayStore() }, (_c, o, settle) => { const s = statuses.shift()!; settle(o, s); settle(o, 200); return `answered ${s}` })
  const d = delivery()
  t.equal((await send(d)).result, 'answered 503')
  t.equal((await send(d)).result, 'answered 200', 'released by the 503 (the second settle did not complete it)')
  t.same((await send(d)).replies.map((r) => r.body), [{ duplicate: true }], 'completed by the 200')
})

t.test('a handler that settles later (after the pipeline returned) still decides the claim', async (t) => {
  let later: (() => void) | undefined
  const { send } = setup({ replay: new MemoryReplayStore() }, (_c, o, settle) => { later = () => { settle(o, 204) }; return 'next' })
  const d = delivery()
  t.equal((await send(d)).result, 'next')
  const meanwhile = await send(d)
  t.same(meanwhile.replies.map((r) => r.body), [{ duplicate: true }], 'in progress: a duplicate, not run twice')
  later!()
  t.same((await send(d)).ran, [], 'completed')
})

t.test('handlers: the pipeline answers with the router and settles; the application handler never runs', async (t) => {
  const seen: string[] = []
  const router = new WebhookEventRouter().on('*', (e) => { seen.push(e.event) })
  const { send } = setup({ replay: new MemoryReplayStore(), handlers: router }, () => { t.fail('the handler must not run'); return 'ran' })
  const d = delivery(['delivered', 'open'])
  const res = await send(d)
  t.same(res.replies.map((r) => [r.status, r.body]), [[200, { handled: 2, skipped: 0, unhandled: 0 }]])
  t.same(seen, ['delivered', 'open'])
  t.same((await send(d)).replies.map((r) => r.body), [{ duplicate: true }], 'the answer completed the claim')
})

t.test('enqueue: a queue that rejects is 503 queue_unavailable with Retry-After, and the claim is released', async (t) => {
  let attempts = 0
  const { send } = setup({ replay: new MemoryReplayStore(), enqueue: async () => { if (++attempts === 1) throw new Error('queue down') } })
  const d = delivery()
  const first = await send(d)
  t.same(first.replies.map((r) => [r.status, (r.body as { code?: string }).code, r.headers['retry-after']]), [[503, 'queue_unavailable', '10']])
  const retry = await send(d)
  t.same(retry.replies.map((r) => [r.status, r.body]), [[200, { queued: 1 }]], 'the retry is queued')
})

t.test('the hot path stays synchronous: key at hand, no replay store, verify on the event loop', async (t) => {
  const { flow } = setup({ replay: false })
  const ctx: Ctx = { d: delivery(), reads: 0, replies: [], ran: [] }
  const result = flow.handle(ctx)
  t.equal(result, 'ran', 'no promise: the handler ran in the same tick')
})

t.test('with the default memory store the hot path stays synchronous too: claim, settle and the duplicate answer', async (t) => {
  const store = new MemoryReplayStore()
  const { flow } = setup({ replay: store })
  const d = delivery()
  const first: Ctx = { d, reads: 0, replies: [], ran: [] }
  t.equal(flow.handle(first), 'ran', 'no promise: claimed and handled in the same tick')
  t.equal(store.size, 1)
  const again: Ctx = { d, reads: 0, replies: [], ran: [] }
  t.equal(flow.handle(again), 'replied', 'the resend is answered in the same tick')
  t.same(again.replies.map((r) => [r.status, r.body]), [[200, { duplicate: true }]])
  t.equal(await store.claim(await idOf(d), 361), 'done', 'the 2xx completed the claim, as the promise API sees it')
})

t.test('a resend whose Signature header spells the same bytes differently is still a duplicate', async (t) => {
  const { send } = setup({ replay: new MemoryReplayStore() })
  const d = delivery()
  t.equal((await send(d)).result, 'ran')
  // 86 base64 characters carry 516 bits for 512: the last one's low 4 bits are ignored when decoding.
  const value = d.headers.signature
  const at = value.lastIndexOf('==:') - 1
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
  const last = alphabet.indexOf(value[at]!)
  const respelled = value.slice(0, at) + alphabet[last ^ 0b0001] + value.slice(at + 1)
  t.not(respelled, value, 'another header text')
  t.same(Buffer.from(respelled.slice(respelled.indexOf('=:') + 2, -1), 'base64'), Buffer.from(value.slice(value.indexOf('=:') + 2, -1), 'base64'), 'the same signature bytes')
  const again = await send({ ...d, headers: { ...d.headers, signature: respelled } })
  t.same(again.ran, [], 'the handler does not run again')
  t.same(again.replies.map((r) => [r.status, r.body]), [[200, { duplicate: true }]])
})

t.test('a memory store whose method was replaced is called through it: a claim that throws is 503, never handled', async (t) => {
  const store = new MemoryReplayStore()
  let calls = 0
  store.claim = async () => { calls++; throw new Error('store down') }
  const { send } = setup({ replay: store })
  const r = await send(delivery())
  t.equal(calls, 1, 'the replaced claim ran')
  t.same(r.ran, [], 'the handler did not run')
  t.equal(r.replies[0]?.status, 503)
  t.equal((r.replies[0]?.body as { code?: string }).code, 'replay_store_unavailable')
  t.equal(r.replies[0]?.headers['retry-after'], '10')
})

t.test('options are validated when the pipeline is made, naming the option', async (t) => {
  t.throws(() => setup({ customerHandle: ['x'] } as never), { name: 'TypeError', message: /customerHandle is not a known option/ })
  t.throws(() => setup({ bodyLimit: 0 }), { name: 'TypeError', message: /bodyLimit must be a positive integer number of bytes/ })
  t.throws(() => setup({ handlers: new WebhookEventRouter(), enqueue: async () => {} }), { name: 'TypeError', message: /handlers and enqueue cannot both be given/ })
})

function signWebhookKeyId (d: SignedWebhook): string {
  return /keyid="([^"]+)"/.exec(d.headers['signature-input'])![1]!
}

t.test('an adapter with a logger per request (Fastify request.log) gets the request\'s lines there', async (t) => {
  const flowLog = recordingLogger()
  const requestLog = recordingLogger()
  const flow = createWebhookPipeline<SignedWebhook, number>({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], logger: flowLog.logger }, {
    log: () => requestLog.logger,
    headers: (d) => d.headers,
    readBody: (d) => d.body,
    reply: (_d, reply) => reply.status,
    run: () => 200,
  })
  const d = delivery()
  t.equal(await flow.handle({ ...d, headers: { ...d.headers, signature: 'sig1=:AAAA:' } }), 400, 'a malformed signature is refused')
  t.ok(requestLog.entries.some((e) => e.msg === 'mailchannels webhook rejected'), 'the rejection is logged to the request\'s logger')
  t.notOk(flowLog.entries.some((e) => e.msg === 'mailchannels webhook rejected'), 'not to the flow\'s')
})

t.test('one tiny port, five handlers: refused, duplicate, accepted, throwing and hanging, each with what it leaves in the replay store', async (t) => {
  // A real memory store, its calls recorded on the way through.
  const memory = new MemoryReplayStore()
  const ops: string[] = []
  const store = {
    claim: async (id: string, ttl: number) => { const s = await memory.claim(id, ttl); ops.push(`claim:${s}`); return s },
    complete: async (id: string, ttl: number) => { ops.push('complete'); await memory.complete(id, ttl) },
    release: async (id: string) => { ops.push('release'); await memory.release(id) },
  }
  type Port = { d: SignedWebhook, handler: () => number | Promise<number> }
  const answers: Array<[string, number]> = []
  const pipeline = createWebhookPipeline<Port, string>({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], replay: store, verifyOnThreadPool: false }, {
    headers: (p) => p.d.headers,
    readBody: (p) => p.d.body,
    reply: (_p, reply) => { answers.push(['reply', reply.status]); return `reply ${reply.status}` },
    run: (p, outcome, settle) => {
      const status = p.handler()
      if (status instanceof Promise) return status.then((s) => { settle(outcome, s); answers.push(['handler', s]); return `handler ${s}` })
      settle(outcome, status)
      answers.push(['handler', status])
      return `handler ${status}`
    },
  })
  const step = async (d: SignedWebhook, handler: () => number | Promise<number>) => {
    answers.length = 0
    ops.length = 0
    return { result: await pipeline.handle({ d, handler }), answers: [...answers], ops: [...ops] }
  }
  const never = () => { throw new Error('the handler must not run') }

  const forged = delivery()
  t.same(await step({ ...forged, headers: { ...forged.headers, signature: 'sig1=:AAAA:' } }, never), { result: 'reply 400', answers: [['reply', 400]], ops: [] }, 'refused: answered, nothing claimed, the handler not run')

  const d = delivery()
  t.same(await step(d, () => 204), { result: 'handler 204', answers: [['handler', 204]], ops: ['claim:claimed', 'complete'] }, 'accepted: run, and its 204 completes the claim')
  t.same(await step(d, never), { result: 'reply 200', answers: [['reply', 200]], ops: ['claim:done'] }, 'duplicate: answered 200, the handler not run')

  const thrown = delivery()
  const threw = await step(thrown, () => { throw new Error('boom') })
  t.same(threw, { result: 'reply 500', answers: [['reply', 500]], ops: ['claim:claimed', 'release'] }, 'throwing: 500, and the claim released')
  t.same((await step(thrown, () => 200)).ops, ['claim:claimed', 'complete'], 'so the retry runs it')

  const hung = delivery()
  answers.length = 0
  ops.length = 0
  const pending = pipeline.handle({ d: hung, handler: () => new Promise<number>(() => {}) })
  t.ok(pending instanceof Promise, 'hanging: the answer never comes')
  await new Promise((resolve) => setImmediate(resolve))
  t.same(ops, ['claim:claimed'], 'its claim stays processing: neither completed nor released')
  t.same(answers, [], 'and nothing was answered for it')
  t.same(await step(hung, never), { result: 'reply 200', answers: [['reply', 200]], ops: ['claim:processing'] }, 'a resend meanwhile is a duplicate, never a second run')
})

t.test('check: the transport checks alone, before any body is read (a framework that parses before a guard refuses early with it)', async (t) => {
  const { flow, entries } = setup({ bodyLimit: 100 })
  const d = delivery()
  t.equal(flow.check(d.headers), null, 'a delivery whose headers pass: null, the body may be read')
  const gzip = flow.check({ ...d.headers, 'content-encoding': 'gzip' })
  t.same(gzip && [gzip.status, gzip.body.code], [415, 'unsupported_media_type'], 'a compressed body is refused')
  const big = flow.check({ ...d.headers, 'content-length': '101' })
  t.same(big && [big.status, big.body.code, big.headers.connection], [413, 'payload_too_large', 'close'], 'a declared length over bodyLimit is refused')
  t.equal(entries.filter((e) => e.msg === 'mailchannels webhook rejected').length, 2, 'each refusal logged once')
})
