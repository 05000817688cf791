// The Fastify plugin under the hostile inputs of mutation.test.ts: a valid delivery with any
// single byte of its body or a signature header changed, or a header dropped or duplicated,
// is never handed to the handler; the reply is the error shape with a known code and the
// status the library pins for it, and echoes nothing it received. Valid deliveries are
// accepted once, whatever their Content-Type (F4: the label is not what protects the bytes);
// an exact resend is a duplicate.
import fc from 'fast-check'
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import { check, failOnUnhandledRejection, KEYS, KNOWN_TYPES, NOW, sign } from './helpers/fixtures.js'
import { HTTP_STATUS_BY_TYPE, type VerifyErrorType } from '../../src/errors.js'
import plugin from '../../src/fastify/index.js'

failOnUnhandledRejection(t)

async function app (t: Test, replay: boolean) {
  const a = Fastify()
  // A fixed clock, so NOW-based deliveries stay fresh however slow the machine is (the
  // receiver's clock never runs backwards, so it advances from NOW with the elapsed time: the
  // deliveries below keep a minute of margin).
  await a.register(plugin, { publicKey: KEYS.publicKey, customerHandles: ['acct_1'], now: () => NOW * 1000, ...(replay ? {} : { replay: false }) })
  let calls = 0
  a.post('/wh', { config: { mailchannelsWebhooks: true } }, async (request) => {
    calls++
    return { received: request.webhookEvents.length }
  })
  t.teardown(() => a.close())
  await a.ready()
  return { app: a, calls: () => calls }
}

const FIELDS = ['body', 'content-digest', 'signature-input', 'signature'] as const
// Bytes a real HTTP/1.1 parser lets through in a field value (CR, LF, NUL and other controls are refused by Node: row C13).
const headerByte = fc.oneof(fc.integer({ min: 0x20, max: 0x7e }), fc.integer({ min: 0x80, max: 0xff }), fc.constant(0x09))

type Mutation =
  | { kind: 'byte', field: (typeof FIELDS)[number], pos: number, byte: number }
  | { kind: 'drop', field: string }
  | { kind: 'twice', field: string }

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('byte' as const), field: fc.constantFrom(...FIELDS), pos: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }) },
  fc.record({ kind: fc.constant('drop' as const), field: fc.constantFrom('content-digest', 'signature-input', 'signature') }),
  fc.record({ kind: fc.constant('twice' as const), field: fc.constantFrom('content-digest', 'signature-input', 'signature') }),
)

/** Any Content-Type a sender might use (or a made-up one), or none. */
const contentType: fc.Arbitrary<string | undefined> = fc.oneof(
  fc.constantFrom(undefined, 'application/json', 'application/json; charset=utf-8', 'text/plain', 'application/octet-stream',
    'application/x-www-form-urlencoded', 'application/json; charset=utf-16le', 'multipart/form-data; boundary=x', 'application/jsonx'),
  fc.tuple(fc.stringMatching(/^[a-z]{1,12}$/), fc.stringMatching(/^[a-z0-9.+-]{1,16}$/)).map(([a, b]) => `${a}/${b}`),
)

t.test('C1 C2 I1: any mutation of a valid delivery is rejected with the pinned status and code; the handler never runs; nothing is echoed', async (t) => {
  const { app: a, calls } = await app(t, false)
  const reasons = new Map<string, number>()
  await check(t,
    fc.asyncProperty(mutation, headerByte, fc.integer({ min: 1, max: 1_000_000 }), async (m, hb, uniq) => {
      const d = sign({ body: `[{"customer_handle":"acct_1","timestamp":1700000000,"event":"delivered","request_id":"r${uniq}"}]` })
      const headers: Record<string, string | string[]> = { 'content-type': 'application/json', ...d.headers }
      let body = d.body
      if (m.kind === 'byte') {
        if (m.field === 'body') {
          body = Buffer.from(d.body)
          const i = m.pos % body.length
          fc.pre(body[i] !== m.byte)
          body[i] = m.byte
        } else {
          const bytes = Buffer.from(d.headers[m.field]!, 'latin1')
          const i = m.pos % bytes.length
          fc.pre(bytes[i] !== hb)
          bytes[i] = hb
          headers[m.field] = bytes.toString('latin1')
        }
      } else if (m.kind === 'drop') {
        delete headers[m.field]
      } else {
        headers[m.field] = [d.headers[m.field]!, sign({ keyId: 'other' }).headers[m.field]!]
      }
      const before = calls()
      const res = await a.inject({ method: 'POST', url: '/wh', headers, payload: body })
      const reply = res.json() as { statusCode: number, code: string, error: string, message: string }
      if (res.statusCode < 400 || calls() !== before) throw new Error(`accepted: ${res.statusCode} ${res.body}`)
      reasons.set(reply.code, (reasons.get(reply.code) ?? 0) + 1)
      const echoed = [d.headers.signature!.slice(6, 40), d.headers['content-digest']!.slice(9, 40), `r${uniq}"`].some((s) => res.body.includes(s))
      return KNOWN_TYPES.has(reply.code) && HTTP_STATUS_BY_TYPE[reply.code as VerifyErrorType] === res.statusCode && reply.statusCode === res.statusCode &&
        Object.keys(reply).sort().join() === 'code,error,message,statusCode' && !echoed
    }),
    800,
  )
  t.equal(calls(), 0, 'the handler never ran')
  t.ok(reasons.size >= 5, `reasons: ${JSON.stringify(Object.fromEntries(reasons))}`)
})

t.test('F4: a valid delivery is accepted whatever its Content-Type, or none; one changed body byte is still rejected', async (t) => {
  const { app: a, calls } = await app(t, false)
  await check(t,
    fc.asyncProperty(contentType, fc.nat(), fc.integer({ min: 1, max: 1_000_000 }), async (type, pos, uniq) => {
      const d = sign({ body: `[{"customer_handle":"acct_1","timestamp":1700000000,"event":"delivered","request_id":"t${uniq}"}]` })
      const headers: Record<string, string> = { ...d.headers }
      if (type !== undefined) headers['content-type'] = type
      const before = calls()
      const ok = await a.inject({ method: 'POST', url: '/wh', headers, payload: d.body })
      const tampered = Buffer.from(d.body)
      const i = pos % tampered.length
      tampered[i] = tampered[i] === 0x41 ? 0x42 : 0x41
      const bad = await a.inject({ method: 'POST', url: '/wh', headers, payload: tampered })
      return ok.statusCode === 200 && ok.json().received === 1 && calls() === before + 1 &&
        bad.statusCode >= 400 && bad.statusCode < 500 && calls() === before + 1
    }),
    200,
  )
})

t.test('B1: any valid delivery is handled exactly once; an exact resend is answered 200 duplicate', async (t) => {
  const { app: a, calls } = await app(t, true)
  await check(t,
    fc.asyncProperty(fc.integer({ min: 1, max: 2 ** 40 }), fc.integer({ min: NOW - 240, max: NOW + 60 }), async (uniq, created) => {
      const d = sign({ created, body: `[{"customer_handle":"acct_1","timestamp":1700000000,"event":"open","request_id":"q${uniq}"}]` })
      const before = calls()
      const headers = { 'content-type': 'application/json', ...d.headers }
      const first = await a.inject({ method: 'POST', url: '/wh', headers, payload: d.body })
      const second = await a.inject({ method: 'POST', url: '/wh', headers, payload: d.body })
      // fast-check may generate the same (uniq, created) twice: then the first send is already a duplicate.
      const firstOk = (first.statusCode === 200 && first.json().received === 1) || first.json().duplicate === true
      return firstOk && second.statusCode === 200 && second.json().duplicate === true && calls() - before <= 1
    }),
    400,
  )
})
