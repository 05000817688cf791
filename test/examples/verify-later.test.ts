import t from 'tap'
import { runExample } from './helpers/run-example.js'

t.test('examples/verify-later.ts runs as is and exits 0', async (t) => {
  const { code, stdout, stderr } = await runExample(t, 'verify-later.ts')
  t.equal(code, 0, stderr)
  const late = 'verified at worker time: signature_expired'
  const onTime = 'verified at arrival time: 10 events (processed, delivered, open, ...)'
  t.equal(stdout, [late, onTime, late, onTime, ''].join('\n'), 'queued deliveries verify at their arrival time, after a key rotation')
})
