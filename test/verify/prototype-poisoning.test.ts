// The poisoning check in parse-events.ts settles an array of events while building them (only an
// event with a `__proto__` key or an object value sends it to a walk of the whole tree); every other
// shape is walked. These cases sit on both sides of that shortcut (row F11 in test/README.md) and
// must give secure-json-parse's verdicts.
import t from 'tap'
import { verifyWebhook } from '../../src/index.js'
import { generateSigningKeyPair, signWebhook } from '../../src/testing/index.js'

const keys = generateSigningKeyPair()
const ev = '"event":"delivered","customer_handle":"acct_1","timestamp":1700000000'

async function verifyBody (payload: string) {
  const { body, headers } = signWebhook({ payload, privateKey: keys.privateKey })
  return verifyWebhook({ payload: body, headers, publicKey: keys.publicKey, customerHandles: ['acct_1'] })
}

const poisoned: Array<[string, string]> = [
  ['flat event with a __proto__ key (shortcut path)', `[{"__proto__":1,${ev}}]`],
  ['flat event with an escaped \\u005f_proto__ key', `[{"\\u005f_proto__":1,${ev}}]`],
  ['__proto__ holding an object (nested path)', `[{"__proto__":{"polluted":true},${ev}}]`],
  ['constructor.prototype (nested path)', `[{"constructor":{"prototype":{"polluted":true}},${ev}}]`],
  ['__proto__ in the second of two flat events', `[{${ev}},{"__proto__":null,${ev}}]`],
  ['__proto__ deep inside an unknown event', `[{"event":"future","customer_handle":"acct_1","timestamp":1,"x":{"y":{"__proto__":{}}}}]`],
  ['constructor.prototype inside arrays inside an unknown event', `[{"event":"future","customer_handle":"acct_1","timestamp":1,"x":[[{"constructor":{"prototype":1}}]]}]`],
  ['an escaped \\u0063onstructor.prototype', `[{"event":"future","customer_handle":"acct_1","timestamp":1,"x":{"\\u0063onstructor":{"prototype":{}}}}]`],
  ['constructor.prototype with an escaped \\u0070rototype', `[{"event":"future","customer_handle":"acct_1","timestamp":1,"x":{"constructor":{"\\u0070rototype":null}}}]`],
]
for (const [name, payload] of poisoned) {
  t.test(`F11 ${name} -> invalid_payload, prototype untouched`, async (t) => {
    const r = await verifyBody(payload)
    t.equal(r.data, null)
    t.equal(r.error?.type, 'invalid_payload')
    t.match(r.error?.message, /__proto__/)
    t.equal(({} as Record<string, unknown>).polluted, undefined)
  })
}

const clean: Array<[string, string, number]> = [
  ['a "{" inside a string value (fallback path)', `[{${ev},"email":"a{b@example.com"}]`, 1],
  ['a constructor key holding a string', `[{${ev},"constructor":"x"}]`, 1],
  ['the word __proto__ inside a value', `[{${ev},"request_id":"__proto__"}]`, 1],
  ['an unknown event with a nested object', `[{"event":"future","customer_handle":"acct_1","timestamp":1,"x":{"y":1}}]`, 1],
  ['an empty array', '[]', 0],
  ['a constructor object without a prototype key', `[{"event":"future","customer_handle":"acct_1","timestamp":1,"x":{"constructor":{"name":"x"},"prototype":{}}}]`, 1],
]
for (const [name, payload, count] of clean) {
  t.test(`F11 ${name} is accepted`, async (t) => {
    const r = await verifyBody(payload)
    t.equal(r.error, null)
    t.equal(r.data?.length, count)
  })
}

t.test('F11 a body nested 100,000 arrays deep, with a constructor key, is refused as not an event array, not a crash', async (t) => {
  const depth = 100_000
  const r = await verifyBody('['.repeat(depth) + '{"constructor":1}' + ']'.repeat(depth))
  t.equal(r.data, null)
  t.equal(r.error?.type, 'invalid_payload')
})
