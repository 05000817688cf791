// The inspector's dead-letter panel in a real headless Chromium: a router's parked
// events with their error and a retry button; hostile text from the event and the error shows as
// text and never runs; the retry runs the handlers and the row goes. The API needs the run's key.
import type { Browser } from 'puppeteer-core'
import t from 'tap'
import { MemoryDeadLetterStore, MemoryClaimStore, WebhookEventRouter, eventFingerprint } from '../../src/index.js'
import { createInspector } from '../../src/testing/inspector/index.js'
import { ev } from '../dispatch/helpers/events.js'
import { findChromium, launchChromium, withStepDeadline } from '../helpers/chromium.js'

declare const window: Record<string, unknown>
declare const document: any // eslint-disable-line @typescript-eslint/no-explicit-any

const XSS_ERROR = '<img src=x onerror="window.__pwned = 1">'


async function parkedRouter (): Promise<{ router: WebhookEventRouter, fixed: () => void, runs: () => number, fingerprint: string }> {
  let broken = true
  let runs = 0
  const router = new WebhookEventRouter({ seenEvents: new MemoryClaimStore(), deadLetters: { store: new MemoryDeadLetterStore(), after: 1 } })
    .on('hard-bounced', () => { runs++; if (broken) throw new TypeError(XSS_ERROR) })
  const event = ev('hard-bounced', 1, { reason: '<script>window.__pwned = 2</script>' })
  await router.dispatch([event])
  return { router, fixed: () => { broken = false }, runs: () => runs, fingerprint: eventFingerprint(event) }
}

t.test('the option is checked', async (t) => {
  await t.rejects(createInspector({ deadLetters: new WebhookEventRouter() }), /deadLetters must be a WebhookEventRouter made with the deadLetters option/)
})

t.test('the API: the list and the retry need the key', async (t) => {
  const { router } = await parkedRouter()
  const inspector = await createInspector({ deadLetters: router })
  t.teardown(() => inspector.close())
  t.equal((await fetch(`${inspector.url}/inspector/api/dead-letters`)).status, 401)
  t.equal((await fetch(`${inspector.url}/inspector/api/dead-letters/abc/retry`, { method: 'POST' })).status, 401)
  const list = await fetch(`${inspector.url}/inspector/api/dead-letters`, { headers: { 'x-api-key': inspector.apiKey } })
  const body = await list.json() as { items: Array<{ error: { message: string } }> }
  t.equal(body.items.length, 1)
  t.equal(body.items[0]!.error.message, XSS_ERROR, 'JSON: the exact text; the page puts it in as text')
  t.equal((await fetch(`${inspector.url}/inspector/api/dead-letters/nope/retry`, { method: 'POST', headers: { 'x-api-key': inspector.apiKey } })).status, 404)
})

const executablePath = findChromium()
t.test('the page: parked events with their error and a retry button', { skip: executablePath === null ? 'Chromium is not installed (apt-get install chromium)' : false }, async (t) => {
  const browser: Browser = await launchChromium(executablePath!)
  t.teardown(async () => { await browser.close() })
  const { router, fixed, runs, fingerprint } = await parkedRouter()
  const inspector = await createInspector({ deadLetters: router })
  t.teardown(() => inspector.close())
  const page = withStepDeadline(await browser.newPage())
  const problems: string[] = []
  page.on('pageerror', (err) => { problems.push(String(err)) })
  await page.goto(inspector.pageUrl, { waitUntil: 'load' })
  const row = `#dead-letter-list tbody tr[data-fingerprint="${fingerprint}"]`
  await page.waitForSelector(row)
  t.equal(await page.$eval(`${row} td.error`, (el) => el.textContent), `TypeError: ${XSS_ERROR}`, 'the error shown as text')
  t.match(await page.$eval(row, (el) => el.textContent), 'hard-bounced')
  t.equal(await page.evaluate(() => window.__pwned), undefined, 'no injected script ran')
  t.equal(await page.evaluate(() => document.querySelectorAll('main img, main svg, main iframe').length), 0)
  fixed()
  await page.click(`${row} button.retry`)
  await page.waitForSelector(row, { hidden: true })
  t.equal(runs(), 2, 'the retry ran the handler')
  t.equal(await router.deadLetters!.get(fingerprint), undefined)
  t.match(await page.$eval('#status', (el) => el.textContent), 'Retry: handled.')
  t.same(problems, [])
})
