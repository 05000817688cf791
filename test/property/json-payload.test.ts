// JSON bodies (rows F7 F11 F12 F13 F14 in test/README.md): arbitrary JSON,
// with "__proto__" and "constructor": {"prototype": ...} injected anywhere, correctly signed,
// never pollutes Object.prototype and yields either events or invalid_payload, never a throw.
import fc from 'fast-check'
import t from 'tap'
import { check, failOnUnhandledRejection, KEYS, NOW_MS, sign } from './helpers/fixtures.js'
import { verifyWebhook } from '../../src/index.js'

failOnUnhandledRejection(t)

const PROTO_KEYS = Object.getOwnPropertyNames(Object.prototype).sort().join(',')
const POISON = ['__proto__', 'constructor', 'prototype', '\\u005f_proto__', 'polluted']

/** Object keys with a strong bias to the poisoning ones (JSON text, so "__proto__" is a real key). */
const key = fc.oneof(fc.constantFrom(...POISON, 'event', 'customer_handle', 'timestamp'), fc.string({ maxLength: 6 }))

/** JSON text (not JS objects: an object literal would set the prototype instead of a key). */
const jsonText: fc.Memo<string> = fc.memo((depth) => {
  const leaf = fc.oneof(fc.json({ maxDepth: 0 }), fc.constantFrom('{"polluted":true}', '{"prototype":{"polluted":true}}'))
  if (depth <= 1) return leaf
  return fc.oneof(
    { weight: 2, arbitrary: leaf },
    fc.array(jsonText(depth - 1), { maxLength: 4 }).map((xs) => `[${xs.join(',')}]`),
    fc.array(fc.tuple(key, jsonText(depth - 1)), { maxLength: 4 }).map((kv) => `{${kv.map(([k, v]) => `${JSON.stringify(k).replace('\\\\u005f', '\\u005f')}:${v}`).join(',')}}`),
  )
})

/** Event-shaped arrays, so the events branch is reached too, with poison keys mixed in. */
const eventArray = fc.array(
  fc.record({
    handle: fc.constantFrom('acct_1', '__proto__', 'constructor'),
    event: fc.constantFrom('delivered', 'open', 'click', 'hard-bounced', '__proto__', 'constructor', 'future-type'),
    extra: fc.array(fc.tuple(key, jsonText(2)), { maxLength: 3 }),
  }).map(({ handle, event, extra }) => `{"customer_handle":"${handle}","timestamp":1700000000,"event":"${event}"${extra.map(([k, v]) => `,${JSON.stringify(k)}:${v}`).join('')}}`),
  { maxLength: 4 },
).map((xs) => `[${xs.join(',')}]`)

t.test('F7 F11 F12 F13 F14: signed arbitrary JSON never pollutes Object.prototype and yields events or invalid_payload', async (t) => {
  const outcomes = { events: 0, invalid_payload: 0 }
  await check(t,
    fc.asyncProperty(fc.oneof(jsonText(4), eventArray), async (text) => {
      const d = sign({ body: text })
      const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: KEYS.publicKey, now: NOW_MS })
      const clean = Object.getOwnPropertyNames(Object.prototype).sort().join(',') === PROTO_KEYS &&
        ({} as Record<string, unknown>).polluted === undefined && Object.getPrototypeOf({}) === Object.prototype
      if (!clean) return false
      if (r.error === null) {
        outcomes.events++
        // Events are fresh plain objects: none may carry an own __proto__ or a foreign prototype.
        return Array.isArray(r.data) && r.data.every((e) => Object.getPrototypeOf(e) === Object.prototype && typeof e.event === 'string')
      }
      outcomes.invalid_payload++
      return r.error.type === 'invalid_payload'
    }),
    2000,
  )
  t.ok(outcomes.events > 50 && outcomes.invalid_payload > 50, `both outcomes exercised: ${JSON.stringify(outcomes)}`)
})
