// What the inspector's list holds of a body's events for its search: bounded, whatever the body.
import t from 'tap'
import { eventsAtAGlance } from '../../src/testing/inspector/describe.js'

const json = (value: unknown): Buffer => Buffer.from(JSON.stringify(value), 'utf8')

t.test('request ids and addresses (email and recipients), distinct, in order', async (t) => {
  const glance = eventsAtAGlance(json([
    { event: 'delivered', request_id: 'r1', email: 'from@shop.example', recipients: ['a@example.net', 'b@example.org'] },
    { event: 'open', request_id: 'r1', recipients: ['a@example.net'] },
    { event: 'click', request_id: 'r2', email: 'a@example.net' },
  ]))
  t.same(glance, { count: 3, types: ['delivered', 'open', 'click'], requestIds: ['r1', 'r2'], addresses: ['from@shop.example', 'a@example.net', 'b@example.org'] })
})

t.test('anything else in a body gives no key and no error', async (t) => {
  t.same(eventsAtAGlance(Buffer.from('not json')), { count: null, types: [], requestIds: [], addresses: [] })
  t.same(eventsAtAGlance(json({ event: 'delivered', request_id: 'r' })), { count: null, types: [], requestIds: [], addresses: [] }, 'an object, not an array')
  t.same(eventsAtAGlance(json([null, 7, 'x', [1], { event: 5, request_id: 5, email: {}, recipients: 'a@b' }, { recipients: [1, null, '', 'ok@example.net'] }])),
    { count: 6, types: ['?', '?', '?', '?', '?', '?'], requestIds: [], addresses: ['ok@example.net'] })
  t.same(eventsAtAGlance(Buffer.from([0xff, 0xfe])).count, null, 'bytes that are not UTF-8')
})

t.test('bounded: the first 1000 events, each value cut at 320 characters', async (t) => {
  const events = Array.from({ length: 1500 }, (_, i) => ({ event: 'delivered', request_id: `r${i}`, recipients: [`${'x'.repeat(400)}${i}@example.net`] }))
  const glance = eventsAtAGlance(json(events))
  t.equal(glance.count, 1500, 'the count is of every event')
  t.equal(glance.types.length, 1000)
  t.equal(glance.requestIds.length, 1000)
  t.equal(glance.requestIds.at(-1), 'r999')
  t.equal(glance.addresses.length, 1, 'addresses that differ only past 320 characters are one')
  t.equal(glance.addresses[0]!.length, 320)
  const many = eventsAtAGlance(json([{ event: 'delivered', recipients: Array.from({ length: 5000 }, (_, i) => `u${i}@example.net`) }]))
  t.equal(many.addresses.length, 1000, 'at most 1000 addresses')
  const spread = eventsAtAGlance(json(Array.from({ length: 1000 }, (_, i) => ({ event: 'delivered', recipients: [`a${i}@example.net`, `b${i}@example.net`] })))).addresses
  t.equal(spread.length, 1000, 'at most 1000 addresses over many events')
  t.equal(spread.at(-1), 'b499@example.net', 'the first ones, in order')
})
