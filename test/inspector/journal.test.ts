import t from 'tap'
import type { InspectedDetail, InspectedSummary } from '../../src/testing/inspector/describe.js'
import { Journal, type JournalNews } from '../../src/testing/inspector/journal.js'

const summary = (endpoint: string): Omit<InspectedSummary, 'seq'> => ({
  at: new Date(0).toISOString(), endpoint, batchId: null, attempt: null, eventCount: 1, eventTypes: ['delivered'], requestIds: [], addresses: [], statusCode: 204,
  durationMs: 1, outcome: 'accepted', reason: null, tamper: null, resend: false, retryInMs: null, error: null, warning: null,
})
const detail = (s: InspectedSummary): InspectedDetail => ({
  ...s,
  request: { method: 'POST', url: s.endpoint, headers: [], body: '', bodyBytes: 0, bodyTruncated: false },
  signature: { base: null, keyId: null, created: null, label: null, problem: 'none' },
  digest: { computed: '', matches: null },
  curl: null,
  response: null,
  remoteAddress: null,
})

t.test('the journal keeps the most recent deliveries within its count and byte budgets', async (t) => {
  const byCount = new Journal(3, 1_000_000)
  for (let i = 1; i <= 5; i++) byCount.add(summary(`/${i}`), detail, 10)
  t.same(byCount.list().map((s) => s.seq), [3, 4, 5])
  t.same(byCount.list(4).map((s) => s.endpoint), ['/5'], 'after a seq')
  t.equal(byCount.get(1), null, 'forgotten')
  t.equal(byCount.get(4)?.endpoint, '/4')

  const byBytes = new Journal(100, 100)
  byBytes.add(summary('/a'), detail, 60)
  byBytes.add(summary('/b'), detail, 60)
  t.same(byBytes.list().map((s) => s.endpoint), ['/b'], 'past the byte budget the oldest goes')
  byBytes.add(summary('/huge'), detail, 10_000)
  t.same(byBytes.list().map((s) => s.endpoint), ['/huge'], 'the newest always stays')
})

t.test('listeners hear each delivery and each change of description, until they leave', async (t) => {
  const journal = new Journal()
  const heard: JournalNews[] = []
  journal.subscribe(() => { throw new Error('a broken stream') })
  const leave = journal.subscribe((news) => heard.push(news))
  journal.add(summary('/x'), detail, 1)
  journal.infoChanged()
  leave()
  journal.add(summary('/y'), detail, 1)
  t.match(heard, [{ kind: 'attempt', summary: { seq: 1, endpoint: '/x' } }, { kind: 'info' }])
  t.equal(heard.length, 2)
  t.equal(journal.subscribers, 1)
})
