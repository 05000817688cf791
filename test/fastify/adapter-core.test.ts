// The framework-free adapter core shared by the plugin and the middleware.
import t from 'tap'
import { failureReply } from '../../src/adapter/flow.js'
import { checkTransport, isJsonUtf8 } from '../../src/adapter/transport.js'
import { VerificationError } from '../../src/errors.js'

t.test('isJsonUtf8: application/json with no charset or utf-8 only', async (t) => {
  for (const ok of ['application/json', 'APPLICATION/JSON', 'application/json; charset=utf-8', 'application/json;charset=UTF-8', 'application/json; charset="utf-8"', 'application/json ; charset=utf-8 ; foo=bar']) {
    t.ok(isJsonUtf8(ok), ok)
  }
  for (const bad of [undefined, '', 'text/plain', 'application/json; charset=utf-16le', 'application/json; charset=latin1', 'application/jsonp', 'application/json+x', 'application/json; charset', 'application/vnd.api+json']) {
    t.notOk(isJsonUtf8(bad), String(bad))
  }
})

t.test('checkTransport: encoding and length', async (t) => {
  t.equal(checkTransport('application/json', undefined, '10', 10), null)
  t.equal(checkTransport('application/json', 'identity', undefined, 10), null)
  t.equal(checkTransport('application/json', 'IDENTITY', undefined, 10), null)
  for (const enc of ['gzip', 'br', 'deflate', 'gzip, gzip', 'identity, gzip']) t.equal(checkTransport('application/json', enc, '1', 10)?.type, 'unsupported_media_type', enc)
  t.equal(checkTransport('application/json', undefined, '11', 10)?.type, 'payload_too_large')
  t.equal(checkTransport('text/plain', undefined, '11', 10)?.type, 'unsupported_media_type', 'media type first')
})

t.test('failureReply: status table, reason phrase, Retry-After on 503 only', async (t) => {
  const r = failureReply(new VerificationError('customer_not_allowed', 'no'))
  t.same(r, { status: 403, body: { statusCode: 403, code: 'customer_not_allowed', error: 'Forbidden', message: 'no' }, retryAfter: undefined })
  t.equal(failureReply(new VerificationError('key_unavailable', 'x', 60)).retryAfter, 60)
  t.equal(failureReply(new VerificationError('key_unavailable', 'x')).retryAfter, 30)
  t.equal(failureReply(new VerificationError('replay_store_unavailable', 'x')).retryAfter, 10)
  t.equal(failureReply(new VerificationError('payload_too_large', 'x')).body.error, 'Payload Too Large')
})
