import t from 'tap'
import { runExample } from './helpers/run-example.js'

t.test('examples/test-your-handler.ts runs as is and exits 0', async (t) => {
  const { code, stdout, stderr } = await runExample(t, 'test-your-handler.ts')
  t.equal(code, 0, stderr)
  t.equal(stdout, [
    'ok - a signed hard bounce suppresses the recipient',
    'ok - a tampered body is rejected with 401 digest_mismatch',
    'ok - another customer_handle is rejected with 403',
    'ok - a replayed delivery does not run the handler twice',
    '',
  ].join('\n'))
})
