// The inspector pages in a real browser: Debian's Chromium, headless, driven by puppeteer-core
// (no browser download). Everything stays on 127.0.0.1. Skipped, with the reason, only when no
// Chromium is installed.
import { execFile } from 'node:child_process'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { promisify } from 'node:util'
import type { Browser, Page } from 'puppeteer-core'
import t, { type Test } from 'tap'
import { createSandbox, type Sandbox } from '../../src/testing/index.js'
import { createInspector } from '../../src/testing/inspector/index.js'
import { libraryReceiver, recorder } from './helpers.js'
import { findChromium, launchChromium, withStepDeadline } from '../helpers/chromium.js'
import { progressed } from '../helpers/hang-deadline.js'

// The functions given to page.evaluate run in the page; these names are the browser's there.
// Declared here, module-scoped, rather than adding the DOM library to the whole project.
declare const window: Record<string, unknown>
declare const document: any // eslint-disable-line @typescript-eslint/no-explicit-any
declare function getComputedStyle (element: unknown): { backgroundColor: string, display: string }
declare const navigator: { clipboard: { readText (): Promise<string> } }
declare const scrollY: number
declare function scrollTo (x: number, y: number): void

const run = promisify(execFile)

/**
 * A deadline for hangs for what the page tests wait on besides the browser (a pasted curl
 * command, the sandbox's delivery to the receiver): each returns as soon as it is done.
 */
const HANG_MS = 60_000

/** Header lines, names lower-cased and sorted, without those curl writes itself from the URL and the body. */
function headerLines (raw: readonly string[]): string[] {
  const out: string[] = []
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase()
    if (!['host', 'content-length', 'connection', 'transfer-encoding', 'keep-alive'].includes(name)) out.push(`${name}: ${raw[i + 1]!}`)
  }
  return out.sort()
}

/** Runs a copied command as a user pasting it would: in a POSIX shell (dash, Debian's /bin/sh). */
async function paste (command: string): Promise<void> {
  await run('/bin/sh', ['-c', `${command}\n`], { timeout: HANG_MS, env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } })
}


// Attacker-controlled text: event fields (anyone can send mail to an address), a receiver's
// answer, header values. Each must show as text and never run.
const XSS_SCRIPT = '<script>window.__pwned = 1</script>'
const XSS_IMG = '<img src=x onerror="window.__pwned = 2">'
const XSS_TYPE = '<svg onload="window.__pwned = 3">'
const XSS_REASON = '<img src=x onerror="window.__pwned = 4">'
const XSS_HEADER = '<iframe srcdoc="<script>parent.__pwned = 5</script>">'

const executablePath = findChromium()
if (executablePath === null) {
  t.plan(0, 'Chromium is not installed (Debian: apt-get install chromium; or set CHROMIUM): the inspector browser tests need it')
} else {
  let browser: Browser
  t.before(async () => {
    browser = await launchChromium(executablePath)
  })
  // Each page test restarts the file's deadline for hangs (.taprc `timeout`): the steps in it
  // have theirs (test/helpers/chromium.ts), and the file runs seven of them one after the other.
  t.beforeEach(() => { progressed() })
  t.teardown(async () => { await browser?.close() })

  /** A page that records what must never happen: script errors, policy violations, dialogs. */
  const openPage = async (t: Test, url: string, viewport = { width: 1400, height: 900 }): Promise<{ page: Page, problems: string[] }> => {
    const page = withStepDeadline(await browser.newPage())
    t.teardown(() => page.close())
    await page.setViewport(viewport)
    const problems: string[] = []
    page.on('pageerror', (err) => { problems.push(`page error: ${String(err)}`) })
    page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console: ${msg.text()}`) })
    page.on('dialog', (dialog) => {
      problems.push(`dialog: ${dialog.message()}`)
      void dialog.dismiss()
    })
    await page.goto(url, { waitUntil: 'load' })
    return { page, problems }
  }

  const text = (page: Page, selector: string): Promise<string> => page.$eval(selector, (el) => el.textContent ?? '')
  const row = (seq: number): string => `#list tbody tr[data-seq="${seq}"]`
  const noScriptRan = async (t: Test, page: Page): Promise<void> => {
    t.equal(await page.evaluate(() => window.__pwned), undefined, 'no injected script ran')
    t.equal(await page.evaluate(() => document.scripts.length), 1, 'the page\'s own script is the only one')
    t.equal(await page.evaluate(() => document.querySelectorAll('main img, main svg, main iframe').length), 0, 'no element was made from delivery text')
  }

  const sandboxFor = async (t: Test): Promise<Sandbox> => {
    const sandbox = await createSandbox({ retryDelay: 5, maxAttempts: 1, deliveryTimeout: HANG_MS, customerHandle: 'acme' })
    t.teardown(() => sandbox.close())
    return sandbox
  }

  t.test('sandbox page: send from the page, see the verdict live, read the detail, spot a tampered delivery', async (t) => {
    const sandbox = await sandboxFor(t)
    const receiver = await libraryReceiver(t, { baseUrl: sandbox.baseUrl, customerHandles: ['acme'] })
    const hostile = await libraryReceiver(t, {
      baseUrl: sandbox.baseUrl,
      customerHandles: ['acme'],
      override: () => ({ status: 400, body: JSON.stringify({ statusCode: 400, code: '<b>bold</b>', error: 'Bad Request', message: XSS_REASON }) }),
    })
    sandbox.enroll(receiver.url)
    const { page, problems } = await openPage(t, sandbox.inspectorUrl)
    await page.waitForSelector('#type-list input')
    t.notMatch(page.url(), '#key=', 'the key is taken out of the address bar')
    t.match(await text(page, '#info'), sandbox.keyId)

    // A batch of two chosen types, sent from the page.
    for (const type of ['processed', 'open', 'hard-bounced', 'soft-bounced', 'dropped', 'complained', 'unsubscribed', 'test']) {
      await page.click(`#type-list input[value="${type}"]`)
    }
    await page.click('#send')
    await page.waitForSelector(row(1))
    t.equal(await text(page, `${row(1)} td:nth-child(5)`), '204', 'status code')
    t.match(await text(page, `${row(1)} td.outcome`), /^accepted/, 'verdict')
    t.equal(await text(page, `${row(1)} td.events`), '2 delivered, click', 'the chosen events')
    t.same(JSON.parse(receiver.got[0]!.body.toString()).map((e: { event: string }) => e.event), ['delivered', 'click'])
    await page.waitForFunction(() => /Batch 1 was answered 204/.test(document.getElementById('status')!.textContent ?? ''))

    // The detail view, by keyboard.
    await page.focus(`${row(1)} button`)
    await page.keyboard.press('Enter')
    await page.waitForSelector('#detail:not([hidden]) #detail-headers')
    t.equal(await page.evaluate(() => document.activeElement?.id), 'detail-title', 'focus moves to the detail view')
    t.match(await text(page, '#detail-title'), 'Batch 1, attempt 1')
    const sentSignature = receiver.got[0]!.rawHeaders[receiver.got[0]!.rawHeaders.indexOf('signature') + 1]!
    t.match(await text(page, '#detail-headers'), `signature:${sentSignature}`, 'the exact signature header sent')
    t.match(await text(page, '#detail-base'), /^"content-digest": sha-256=:.+:\n"@signature-params": \("content-digest"\);created=\d+;alg="ed25519";keyid="sandbox-[0-9a-f]{16}"$/)
    t.match(await text(page, '#detail-payload'), '\n    "event": "delivered",', 'the body, pretty-printed')
    t.match(await text(page, '#detail-digest'), 'matches the body')
    await page.keyboard.press('Escape')
    await page.waitForSelector('#detail', { hidden: true })
    t.equal(await page.evaluate(() => document.activeElement?.closest('tr')?.dataset.seq), '1', 'focus goes back to the row')

    // A tampered delivery, and the receiver's reason.
    await page.click('#send-body')
    await page.waitForSelector(row(2))
    t.match(await text(page, `${row(2)} td.outcome`), /rejected\s*digest_mismatch\s*tampered: body/)
    await page.click(`${row(2)} button`)
    await page.waitForSelector('#detail-reason')
    t.match(await text(page, '#detail-reason'), /^digest_mismatch The body does not match its Content-Digest/)
    t.match(await text(page, '#detail-digest'), 'does not match the body')
    // By keyboard: the button keeps the focus while its request runs and after.
    await page.focus('#send-expired')
    await page.keyboard.press('Enter')
    await page.waitForSelector(row(3))
    t.match(await text(page, `${row(3)} td.outcome`), 'signature_expired')
    t.equal(await page.evaluate(() => document.activeElement?.id), 'send-expired', 'focus stays on the button')

    // Attacker-controlled text arrives live (no reload) and shows as text.
    await sandbox.deliver([
      { event: 'delivered', customer_handle: 'acme', timestamp: Math.floor(Date.now() / 1000), email: XSS_SCRIPT, campaign_id: XSS_IMG },
      { event: XSS_TYPE, customer_handle: 'acme', timestamp: Math.floor(Date.now() / 1000) },
    ])
    await page.waitForSelector(row(4))
    t.match(await text(page, `${row(4)} td.events`), XSS_TYPE, 'an event type is shown as text in the list')
    await page.click(`${row(4)} button`)
    await page.waitForFunction(() => document.getElementById('detail-title')?.textContent === 'Batch 4, attempt 1')
    const payload = await text(page, '#detail-payload')
    t.match(payload, JSON.stringify(XSS_SCRIPT), 'the <script> field is shown as text')
    t.match(payload, JSON.stringify(XSS_IMG))
    await sandbox.deliver(undefined, { target: hostile.url })
    await page.waitForSelector(row(5))
    t.match(await text(page, `${row(5)} td.outcome`), '<b>bold</b>', 'a receiver\'s reason code is text')
    await page.click(`${row(5)} button`)
    await page.waitForFunction(() => document.getElementById('detail-title')?.textContent === 'Batch 5, attempt 1')
    t.match(await text(page, '#detail-reason'), XSS_REASON, 'a receiver\'s message is text')
    await noScriptRan(t, page)

    // Resend and rotate, from the page.
    await page.click(`${row(1)} button`)
    await page.waitForFunction(() => document.getElementById('detail-title')?.textContent === 'Batch 1, attempt 1')
    await page.click('#resend')
    await page.waitForSelector(row(6))
    t.match(await text(page, `${row(6)} td.outcome`), /accepted\s*resent/)
    t.match(await text(page, `${row(6)} td.name`), '#1 · try 2')
    const before = sandbox.keyId
    await page.click('#rotate')
    await page.waitForFunction((old: string) => !(document.getElementById('info')?.textContent ?? '').includes(old), {}, before)
    t.not(sandbox.keyId, before)
    t.match(await text(page, '#info'), sandbox.keyId, 'the header shows the new key id')

    // Readable in dark mode: the colour scheme follows the system.
    await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'dark' }])
    t.equal(await page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor), 'rgb(13, 17, 23)')
    await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'light' }])
    t.equal(await page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor), 'rgb(255, 255, 255)')
    t.same(problems, [], 'no script error, policy violation or dialog')
  })

  t.test('inspect page: deliveries sent from the sandbox page show with the library\'s verdict', async (t) => {
    const sandbox = await sandboxFor(t)
    const inspector = await createInspector({ baseUrl: sandbox.baseUrl, customerHandles: ['acme'] })
    t.teardown(() => inspector.close())
    sandbox.enroll(`${inspector.url}/webhooks`)
    const receiving = await openPage(t, inspector.pageUrl)
    await receiving.page.waitForFunction(() => /receiving at/.test(document.getElementById('info')?.textContent ?? ''))
    t.notMatch(receiving.page.url(), '#key=')
    t.equal(await receiving.page.$('#actions'), null, 'the receiving side has no send buttons')
    const sending = await openPage(t, sandbox.inspectorUrl)
    await sending.page.waitForSelector('#type-list input')

    // Puppeteer clicks what is rendered, and a background tab is not: the acting page comes first.
    await sending.page.bringToFront()
    await sending.page.click('#send')
    await receiving.page.waitForSelector(row(1))
    t.equal(await text(receiving.page, `${row(1)} td:nth-child(3)`), '/webhooks')
    t.equal(await text(receiving.page, `${row(1)} td:nth-child(5)`), '204')
    t.match(await text(receiving.page, `${row(1)} td.outcome`), /^accepted/)
    t.match(await text(receiving.page, `${row(1)} td.events`), /^10 /)

    await sending.page.click('#send-body')
    await receiving.page.waitForSelector(row(2))
    t.match(await text(receiving.page, `${row(2)} td.outcome`), /rejected\s*digest_mismatch/)
    await receiving.page.bringToFront()
    await receiving.page.click(`${row(2)} button`)
    await receiving.page.waitForSelector('#detail-reason')
    t.match(await text(receiving.page, '#detail-title'), 'Delivery #2')
    t.match(await text(receiving.page, '#detail-reason'), /^digest_mismatch The body does not match its Content-Digest/)
    t.match(await text(receiving.page, '#detail-verdict'), 'Verified with the library: answered 401, rejected')

    await sending.page.bringToFront()
    await sending.page.click('#send-replay')
    await receiving.page.waitForSelector(row(3))
    t.match(await text(receiving.page, `${row(3)} td.outcome`), /^duplicate/, 'an exact copy is a duplicate')

    // Hostile text in a delivery's events and headers.
    await sandbox.deliver([{ event: 'delivered', customer_handle: 'acme', timestamp: Math.floor(Date.now() / 1000), email: XSS_SCRIPT, campaign_id: XSS_IMG }])
    await receiving.page.waitForSelector(row(4))
    await receiving.page.bringToFront()
    await receiving.page.click(`${row(4)} button`)
    await receiving.page.waitForFunction(() => document.getElementById('detail-title')?.textContent === 'Delivery #4')
    t.match(await text(receiving.page, '#detail-payload'), JSON.stringify(XSS_SCRIPT), 'the <script> field is shown as text')
    const res = await fetch(`${inspector.url}/webhooks`, { method: 'POST', headers: { 'content-type': 'application/json', 'signature-input': XSS_HEADER, 'x-note': XSS_SCRIPT }, body: JSON.stringify([{ event: XSS_TYPE }]) })
    t.equal(res.status, 400)
    await receiving.page.waitForSelector(row(5))
    t.match(await text(receiving.page, `${row(5)} td.events`), XSS_TYPE)
    await receiving.page.click(`${row(5)} button`)
    await receiving.page.waitForFunction(() => document.getElementById('detail-title')?.textContent === 'Delivery #5')
    t.match(await text(receiving.page, '#detail-headers'), `signature-input:${XSS_HEADER}`, 'a hostile header value is text')
    t.match(await text(receiving.page, '#detail-headers'), `x-note:${XSS_SCRIPT}`)
    t.match(await text(receiving.page, '#detail-reason'), /^missing_header /)
    await noScriptRan(t, receiving.page)
    await noScriptRan(t, sending.page)
    t.same(receiving.problems, [], 'no script error, policy violation or dialog')
    t.same(sending.problems, [])
  })

  t.test('without the key the page shows nothing but asks for it; a wrong key is refused', async (t) => {
    const sandbox = await sandboxFor(t)
    const { page } = await openPage(t, `${sandbox.baseUrl}/`)
    await page.waitForSelector('#login:not([hidden])')
    t.ok(await page.$('#deliveries[hidden]'), 'no list')
    t.equal(await page.evaluate(() => document.activeElement?.id), 'login-key', 'the key field has the focus')
    await page.keyboard.type('not-the-key')
    await page.keyboard.press('Enter')
    await page.waitForFunction(() => /refused/.test(document.getElementById('login-why')?.textContent ?? ''))
    t.ok(await page.$('#deliveries[hidden]'), 'still no list')
    await page.keyboard.type(sandbox.apiKey)
    await page.keyboard.press('Enter')
    await page.waitForSelector('#deliveries:not([hidden])')
    t.ok(await page.$('#login[hidden]'))
    await page.reload({ waitUntil: 'load' })
    await page.waitForSelector('#deliveries:not([hidden])')
    t.pass('the key is kept for the tab across a reload')
  })

  const visibleRows = (page: Page): Promise<string[]> => page.$$eval('#list tbody tr:not([hidden])', (trs) => trs.map((tr) => (tr as unknown as { dataset: { seq: string } }).dataset.seq))
  const clearSearch = async (page: Page): Promise<void> => {
    await page.click('#filter-search', { clickCount: 3 })
    await page.keyboard.press('Backspace')
  }
  const now = (): number => Math.floor(Date.now() / 1000)

  t.test('sandbox page: the send buttons name their endpoint; filters and search change the rows shown, live rows included', async (t) => {
    const sandbox = await sandboxFor(t)
    const receiver = await libraryReceiver(t, { baseUrl: sandbox.baseUrl, customerHandles: ['acme'] })
    const { page, problems } = await openPage(t, sandbox.inspectorUrl)
    await page.waitForSelector('#type-list input')
    t.match(await text(page, '#send-target'), /^No endpoint enrolled yet/, 'no endpoint: the page says so')
    sandbox.enroll(receiver.url)
    await page.waitForSelector('#send-target-url')
    t.equal(await text(page, '#send-target'), `These buttons send one batch to ${receiver.url}.`)
    sandbox.enroll('http://127.0.0.1:9/second')
    await page.waitForFunction(() => /first of the 2 enrolled/.test(document.getElementById('send-target')?.textContent ?? ''))
    t.equal(await text(page, '#send-target-url'), receiver.url, 'the first enrolled endpoint, where deliverOne sends')
    // An endpoint's URL is shown as text (it is kept as given when it has no space or control).
    sandbox.removeEndpoints()
    const odd = 'http://127.0.0.1:9/<svg/onload=window.__pwned=6>'
    sandbox.enroll(odd)
    await page.waitForFunction((url: string) => document.getElementById('send-target-url')?.textContent === url, {}, odd)
    await noScriptRan(t, page)
    sandbox.removeEndpoints()
    sandbox.enroll(receiver.url)
    await page.waitForFunction((url: string) => document.getElementById('send-target-url')?.textContent === url, {}, receiver.url)
    t.equal(await text(page, '#send-target'), `These buttons send one batch to ${receiver.url}.`)

    // Sent from the page: the button goes where the page said.
    await page.click('#send-expired')
    await page.waitForSelector(row(1))
    t.equal(receiver.got.length, 1, 'Send expired reached the named endpoint')
    t.match(await text(page, `${row(1)} td.endpoint`), receiver.url)
    await sandbox.deliver([{ event: 'delivered', customer_handle: 'acme', timestamp: now(), request_id: 'req-alpha', email: 'news@shop.example', recipients: ['zoe@example.net'] }])
    await sandbox.deliver([{ event: 'click', customer_handle: 'acme', timestamp: now(), request_id: 'req-beta', recipients: ['max@example.org'] }], { tamper: 'body' })
    await sandbox.deliver([{ event: 'hard-bounced', customer_handle: 'acme', timestamp: now(), request_id: 'req-gamma', recipients: ['Zoe@Example.net'] }])
    await sandbox.deliver([{ event: 'brand-new-type', customer_handle: 'acme', timestamp: now(), request_id: 'req-delta' }])
    await page.waitForSelector(row(5))
    t.same(await visibleRows(page), ['5', '4', '3', '2', '1'], 'no filter: every row')
    t.equal(await text(page, '#filter-count'), '', 'no count without a filter')

    await page.select('#filter-outcome', 'rejected')
    t.same(await visibleRows(page), ['3', '1'], 'outcome: rejected (the tampered and the expired one)')
    t.equal(await text(page, '#filter-count'), '2 of 5 shown')
    await page.select('#filter-outcome', 'accepted')
    t.same(await visibleRows(page), ['5', '4', '2'])
    await page.select('#filter-outcome', 'problem')
    t.same(await visibleRows(page), ['3', '1'], 'not accepted')
    await page.select('#filter-outcome', '')

    await page.select('#filter-type', 'click')
    t.same(await visibleRows(page), ['3', '1'], 'event type: click (row 1 holds one event of each type)')
    await page.select('#filter-type', '?other')
    t.same(await visibleRows(page), ['5'], 'event type: one the library does not know')
    await page.select('#filter-type', 'hard-bounced')
    await page.select('#filter-outcome', 'accepted')
    t.same(await visibleRows(page), ['4'], 'type and outcome together')
    await page.select('#filter-outcome', '')
    await page.select('#filter-type', '')

    await page.type('#filter-search', 'REQ-GAMMA')
    t.same(await visibleRows(page), ['4'], 'search: a request id, any case')
    await clearSearch(page)
    await page.type('#filter-search', 'zoe@example')
    t.same(await visibleRows(page), ['4', '2'], 'search: a recipient')
    await clearSearch(page)
    await page.type('#filter-search', 'attacker@evil')
    t.same(await visibleRows(page), ['3'], 'search: an address of the body as sent (tampered after signing)')
    await clearSearch(page)
    await page.type('#filter-search', 'nobody@nowhere')
    t.same(await visibleRows(page), [])
    t.ok(await page.$('#no-match:not([hidden])'), 'the page says nothing matches')
    await clearSearch(page)

    // Filters hold for rows that arrive live.
    await page.type('#filter-search', 'zoe@')
    await page.select('#filter-outcome', 'accepted')
    await sandbox.deliver([{ event: 'open', customer_handle: 'acme', timestamp: now(), request_id: 'req-eps', recipients: ['zoe@example.net'] }])
    await sandbox.deliver([{ event: 'open', customer_handle: 'acme', timestamp: now(), request_id: 'req-zeta', recipients: ['max@example.org'] }])
    await page.waitForSelector(row(7))
    t.same(await visibleRows(page), ['6', '4', '2'], 'a live row is shown only when it matches')
    t.equal(await text(page, '#filter-count'), '3 of 7 shown')
    t.same(problems, [], 'no script error, policy violation or dialog')
  })

  t.test('detail view: the events one per row; Copy as cURL replays the same bytes; Copy body', async (t) => {
    const sandbox = await sandboxFor(t)
    const receiver = await libraryReceiver(t, { baseUrl: sandbox.baseUrl, customerHandles: ['acme'] })
    sandbox.enroll(receiver.url)
    const { page, problems } = await openPage(t, sandbox.inspectorUrl)
    await browser.defaultBrowserContext().overridePermissions(sandbox.baseUrl, ['clipboard-read', 'clipboard-write', 'clipboard-sanitized-write'])
    await page.waitForSelector('#type-list input')
    const hostile = `it's "q" $HOME $(id) \`id\` \\ %s zoë ${XSS_SCRIPT}`
    await sandbox.deliver([
      { event: 'delivered', customer_handle: 'acme', timestamp: 1_700_000_000, request_id: 'req-1', email: 'news@shop.example', recipients: ['zoë@example.net', 'bob@example.org'] },
      { event: 'click', customer_handle: 'acme', timestamp: 1_700_000_001, request_id: 'req-2', recipients: [hostile], url: 'https://shop.example/?a=1&b=2' },
      { event: XSS_TYPE, customer_handle: 'acme', timestamp: 1_700_000_002, request_id: XSS_IMG },
    ])
    await page.waitForSelector(row(1))
    await page.click(`${row(1)} button`)
    await page.waitForSelector('#detail-events')
    t.equal(await text(page, '#detail-endpoint'), `POST ${receiver.url}`, 'the detail names its endpoint')
    const cells = await page.$$eval('#detail-events tbody.event', (groups) => groups.map((g) => [...(g as unknown as { querySelector (s: string): { cells: Array<{ textContent: string }> } }).querySelector('tr.main').cells].map((c) => c.textContent)))
    t.equal(cells.length, 3, 'one row per event')
    t.same(cells.map((c) => c[1]), ['delivered', 'click', XSS_TYPE], 'each event\'s type, in order')
    t.same(cells.map((c) => c[5]), ['req-1', 'req-2', XSS_IMG], 'each request id')
    t.equal(cells[0]![3], 'news@shop.example')
    t.equal(cells[0]![4], 'zoë@example.net, bob@example.org')
    t.equal(cells[1]![4], hostile, 'a hostile recipient is text')
    t.equal(await text(page, '#detail-events tbody.event:nth-of-type(2) tr.more'), 'url: https://shop.example/?a=1&b=2', 'the other fields beneath')
    t.equal(await page.$('#detail-events tbody.event:nth-of-type(1) tr.more'), null, 'no line of other fields when there are none')
    t.ok(await page.$$eval('#detail-body h3', (hs) => hs.some((h) => h.textContent === 'Events (3)')), 'a heading counts them')

    // Copy as cURL: the clipboard holds the command the page shows; pasted into a shell it sends
    // the same header lines and body bytes to the same endpoint.
    await page.click('#copy-curl')
    await page.waitForFunction(() => /^Copied/.test(document.getElementById('copy-status')?.textContent ?? ''))
    const copied = await page.evaluate(() => navigator.clipboard.readText())
    t.equal(copied, await page.$eval('#detail-curl', (el) => el.textContent ?? ''), 'the clipboard holds the command shown')
    await paste(copied)
    t.equal(receiver.got.length, 2, 'the command sent one request')
    t.ok(receiver.got[1]!.body.equals(receiver.got[0]!.body), 'the same body bytes')
    t.same(headerLines(receiver.got[1]!.rawHeaders), headerLines(receiver.got[0]!.rawHeaders), 'the same header lines, and no others')

    await page.click('#copy-body')
    await page.waitForFunction(() => /^Copied the body/.test(document.getElementById('copy-status')?.textContent ?? ''))
    t.equal(await page.evaluate(() => navigator.clipboard.readText()), receiver.got[0]!.body.toString('utf8'), 'Copy body: the body as sent')
    await noScriptRan(t, page)
    t.same(problems, [], 'no script error, policy violation or dialog')
  })

  t.test('inspect page: Copy as cURL of a raw delivery (newlines, quotes, $, backticks, non-ASCII) replays the same bytes', async (t) => {
    const inspector = await createInspector({ publicKey: 'MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=' })
    t.teardown(() => inspector.close())
    const { page, problems } = await openPage(t, inspector.pageUrl)
    await browser.defaultBrowserContext().overridePermissions(inspector.url, ['clipboard-read', 'clipboard-write', 'clipboard-sanitized-write'])
    await page.waitForFunction(() => /receiving at/.test(document.getElementById('info')?.textContent ?? ''))
    const body = Buffer.from(`[{"event":"delivered","email":"it's \\"q\\" $HOME $(id) \`id\`"}]\n\nline two\r\n\tzoë 名前 %s \\ -- '`, 'utf8')
    const res = await fetch(`${inspector.url}/hooks/raw?x=1`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-note': `a'b"c$d\`e` }, body })
    t.equal(res.status, 400, 'unsigned: rejected, and kept')
    await page.waitForSelector(row(1))
    await page.click(`${row(1)} button`)
    await page.waitForSelector('#detail-curl')
    t.equal(await text(page, '#detail-endpoint'), 'POST /hooks/raw?x=1')
    await page.click('#copy-curl')
    await page.waitForFunction(() => /^Copied/.test(document.getElementById('copy-status')?.textContent ?? ''))
    const copied = await page.evaluate(() => navigator.clipboard.readText())
    t.match(copied, `'${inspector.url}/hooks/raw?x=1'`, 'sent to where the delivery arrived')
    // A user replays it at their own receiver: the URL is the one thing changed.
    const target = await recorder(t)
    await paste(copied.replace(`'${inspector.url}/hooks/raw?x=1'`, `'${target.origin}/hooks/raw?x=1'`))
    t.equal(target.got.length, 1)
    t.ok(target.got[0]!.body.equals(body), 'the same body bytes')
    const sent = (await (await fetch(`${inspector.url}/inspector/api/attempts/1`, { headers: { 'x-api-key': inspector.apiKey } })).json()) as { request: { headers: Array<[string, string]> } }
    t.same(headerLines(target.got[0]!.rawHeaders), headerLines(sent.request.headers.flat()), 'the same header lines as received, and no others')
    t.same(problems, [])
  })

  t.test('a 420 px window: status and outcome stay in view; the endpoint stays in view while a detail is open', async (t) => {
    const sandbox = await sandboxFor(t)
    const receiver = await libraryReceiver(t, { baseUrl: sandbox.baseUrl, customerHandles: ['acme'] })
    sandbox.enroll(receiver.url)
    const { page, problems } = await openPage(t, sandbox.inspectorUrl, { width: 420, height: 800 })
    await page.waitForSelector('#type-list input')
    await page.click('#send-body')
    await page.waitForSelector(row(1))
    await sandbox.deliver(undefined)
    await page.waitForSelector(row(2))
    t.equal(await page.evaluate(() => document.documentElement.scrollWidth), 420, 'nothing wider than the window')
    for (const seq of [1, 2]) {
      await page.$eval(row(seq), (tr) => (tr as unknown as { scrollIntoView (o: unknown): void }).scrollIntoView({ block: 'center' }))
      for (const cell of ['td.status', 'td.outcome', 'td.name']) {
        const box = await (await page.$(`${row(seq)} ${cell}`))!.boundingBox()
        t.ok(box !== null && box.x >= 0 && box.x + box.width <= 420 && box.y >= 0 && box.y + box.height <= 800, `row ${seq}: ${cell} inside the viewport (${JSON.stringify(box)})`)
      }
    }
    t.match(await text(page, `${row(1)} td.outcome`), /rejected\s*digest_mismatch/)
    t.equal(await text(page, `${row(2)} td.status`), '204')

    await page.click(`${row(1)} button`)
    await page.waitForSelector('#detail-response')
    // Read down to the end of the detail: its head (which delivery, where it went, Close) stays.
    await page.$eval('#detail-response', (el) => (el as unknown as { scrollIntoView (o: unknown): void }).scrollIntoView({ block: 'end' }))
    t.ok(await page.evaluate(() => scrollY > 0), 'the page scrolled')
    for (const id of ['#detail-endpoint', '#detail-close']) {
      const box = await (await page.$(id))!.boundingBox()
      t.ok(box !== null && box.x >= 0 && box.x + box.width <= 420 && box.y >= 0 && box.y + box.height <= 800, `${id} in view at the end of the detail (${JSON.stringify(box)})`)
    }
    t.equal(await text(page, '#detail-endpoint'), `POST ${receiver.url}`)
    t.equal(await page.evaluate(() => document.documentElement.scrollWidth), 420, 'still nothing wider than the window')

    // Wide, with the detail beside the list: the list keeps its endpoint column.
    await page.setViewport({ width: 1400, height: 900 })
    t.not(await page.$eval(`${row(2)} td.endpoint`, (el) => getComputedStyle(el).display), 'none', 'the list shows the endpoint beside an open detail')
    t.same(problems, [])
  })
}
