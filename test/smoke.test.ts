import t from 'tap'
import { Webhooks } from '../src/index.js'
t.test('smoke', async (t) => {
  const r = await Webhooks.verify({ payload: '[]', headers: {} })
  t.equal(r.error?.type, 'missing_header')
})
