// The framework-free adapter core shared by the plugin and the middleware.
import t from 'tap'
import { failureReply } from '../../src/receiver/pipeline.js'
import { checkTransport, mediaTypeOf, resolveContentTypes } from '../../src/receiver/transport.js'
import { VerificationError } from '../../src/errors.js'

t.test('mediaTypeOf: type/subtype, lower case, parameters dropped', async (t) => {
  t.equal(mediaTypeOf('application/json'), 'application/json')
  t.equal(mediaTypeOf(' Application/JSON ; charset=UTF-8'), 'application/json')
  t.equal(mediaTypeOf(undefined), null)
})

t.test('checkTransport: any media type by default; contentTypes restricts; encoding and length', async (t) => {
  for (const ct of [undefined, '', 'text/plain', 'application/octet-stream', 'application/json; charset=utf-16le']) t.equal(checkTransport(ct, undefined, '1', 10), null, String(ct))
  const json = resolveContentTypes(['Application/JSON'])
  t.equal(checkTransport('application/json; charset=utf-8', undefined, '1', 10, json), null)
  for (const ct of [undefined, 'text/plain', 'application/jsonx']) t.equal(checkTransport(ct, undefined, '1', 10, json)?.type, 'unsupported_media_type', String(ct))
  t.equal(checkTransport('application/json', undefined, '10', 10), null)
  t.equal(checkTransport('application/json', 'identity', undefined, 10), null)
  t.equal(checkTransport('application/json', 'IDENTITY', undefined, 10), null)
  for (const enc of ['gzip', 'br', 'deflate', 'gzip, gzip', 'identity, gzip']) {
    const err = checkTransport('application/json', enc, '1', 10)
    t.equal(err?.type, 'unsupported_media_type', enc)
    t.match(err?.message, `Content-Encoding ${JSON.stringify(enc)}`)
  }
  t.match(checkTransport(undefined, 'x'.repeat(200), '1', 10)?.message, /Content-Encoding \(an unsupported value\)/, 'a long value is not echoed')
  t.equal(checkTransport('application/json', undefined, '11', 10)?.type, 'payload_too_large')
  t.equal(checkTransport('text/plain', undefined, '11', 10, json)?.type, 'unsupported_media_type', 'media type first')
})

t.test('resolveContentTypes: a non-empty list of bare media types', async (t) => {
  t.equal(resolveContentTypes(undefined), null)
  t.same([...resolveContentTypes([' text/plain', 'application/json'])!], ['text/plain', 'application/json'])
  for (const bad of [[], 'application/json', ['json'], ['application/json; charset=utf-8'], [1]]) t.throws(() => resolveContentTypes(bad), { name: 'TypeError', message: /contentTypes/ }, JSON.stringify(bad))
})

t.test('failureReply: status table, reason phrase, Retry-After on 503 only', async (t) => {
  const r = failureReply(new VerificationError('customer_not_allowed', 'no'))
  t.same(r, { status: 403, headers: {}, body: { statusCode: 403, code: 'customer_not_allowed', error: 'Forbidden', message: 'no' } })
  t.equal(failureReply(new VerificationError('key_unavailable', 'x', 60)).headers['retry-after'], '60')
  t.equal(failureReply(new VerificationError('key_unavailable', 'x')).headers['retry-after'], '30')
  t.equal(failureReply(new VerificationError('replay_store_unavailable', 'x')).headers['retry-after'], '10')
  t.equal(failureReply(new VerificationError('payload_too_large', 'x')).body.error, 'Payload Too Large')
})
