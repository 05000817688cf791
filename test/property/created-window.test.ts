// The freshness window (rows B3/B4/B6/B7 in test/README.md): `created` over all
// integers is accepted iff now - maxAge <= created <= now + clockSkew; otherwise exactly
// signature_expired or signature_from_future.
import fc from 'fast-check'
import t from 'tap'
import { check, failOnUnhandledRejection, KEYS, NOW, NOW_MS, sign } from './helpers/fixtures.js'
import { verifyWebhook } from '../../src/index.js'
import { MAX_CLOCK_SKEW, MAX_MAX_AGE } from '../../src/verify/options.js'

failOnUnhandledRejection(t)

const MAX_SF_INTEGER = 999_999_999_999_999 // RFC 9651 §3.3.1: at most 15 digits

const created = fc.oneof(
  fc.integer({ min: NOW - 400, max: NOW + 120 }), // around both edges
  fc.integer({ min: NOW - 10_000_000, max: NOW + 10_000_000 }),
  fc.integer({ min: -MAX_SF_INTEGER, max: MAX_SF_INTEGER }),
  fc.constantFrom(NOW - 300, NOW - 301, NOW + 60, NOW + 61, 0, -1, MAX_SF_INTEGER, -MAX_SF_INTEGER),
)
/** The window: default (300/60) or configured. */
const window = fc.oneof(
  fc.constant({ maxAge: undefined, clockSkew: undefined }),
  fc.record({ maxAge: fc.integer({ min: 1, max: MAX_MAX_AGE }), clockSkew: fc.integer({ min: 0, max: MAX_CLOCK_SKEW }) }),
)
/** "now" in ms, not always on a whole second: the verifier floors it. */
const nowMs = fc.oneof(fc.constant(NOW_MS), fc.integer({ min: NOW_MS - 5_000, max: NOW_MS + 5_000 }))

t.test('B3 B4 B6 B7: created is accepted iff inside [now - maxAge, now + clockSkew], else the exact reason', async (t) => {
  const seen = { accepted: 0, signature_expired: 0, signature_from_future: 0 }
  await check(t,
    fc.asyncProperty(created, window, nowMs, async (c, w, ms) => {
      const d = sign({ created: c })
      const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: KEYS.publicKey, now: ms, ...w })
      const now = Math.floor(ms / 1000)
      const maxAge = w.maxAge ?? 300
      const skew = w.clockSkew ?? 60
      const expected = c < now - maxAge ? 'signature_expired' : c > now + skew ? 'signature_from_future' : null
      if (expected === null) seen.accepted++
      else seen[expected]++
      return expected === null ? r.error === null && r.data.length === 1 : r.data === null && r.error.type === expected
    }),
    3000,
  )
  t.ok(seen.accepted > 100 && seen.signature_expired > 100 && seen.signature_from_future > 100, `all three outcomes exercised: ${JSON.stringify(seen)}`)
})

t.test('B8: expires is honoured: accepted iff expires >= now (created inside the window)', async (t) => {
  await check(t,
    fc.asyncProperty(fc.integer({ min: NOW - 1000, max: NOW + 1000 }), async (expires) => {
      const d = sign({ params: `("content-digest");created=${NOW};alg="ed25519";keyid="mckey";expires=${expires}` })
      const r = await verifyWebhook({ payload: d.body, headers: d.headers, publicKey: KEYS.publicKey, now: NOW_MS })
      return expires >= NOW ? r.error === null : r.error?.type === 'signature_expired'
    }),
    500,
  )
})
