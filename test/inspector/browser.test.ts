// The inspector pages in a real browser: Debian's Chromium, headless, driven by puppeteer-core
// (no browser download). Everything stays on 127.0.0.1. Skipped, with the reason, only when no
// Chromium is installed.
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import puppeteer, { type Browser, type Page } from 'puppeteer-core'
import t, { type Test } from 'tap'
import { createSandbox, type Sandbox } from '../../src/testing/index.js'
import { createInspector } from '../../src/testing/inspector/index.js'
import { libraryReceiver } from './helpers.js'

// The functions given to page.evaluate run in the page; these names are the browser's there.
// Declared here, module-scoped, rather than adding the DOM library to the whole project.
declare const window: Record<string, unknown>
declare const document: any // eslint-disable-line @typescript-eslint/no-explicit-any
declare function getComputedStyle (element: unknown): { backgroundColor: string }

function findChromium (): string | null {
  if (process.env.CHROMIUM !== undefined && process.env.CHROMIUM !== '') return process.env.CHROMIUM
  if (existsSync('/usr/bin/chromium')) return '/usr/bin/chromium'
  try {
    return execFileSync('which', ['chromium'], { encoding: 'utf8' }).trim() || null
  } catch {
    return null
  }
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
    browser = await puppeteer.launch({ executablePath, headless: true, args: ['--no-sandbox'], timeout: 20_000 })
  })
  t.teardown(async () => { await browser?.close() })

  /** A page that records what must never happen: script errors, policy violations, dialogs. */
  const openPage = async (t: Test, url: string): Promise<{ page: Page, problems: string[] }> => {
    const page = await browser.newPage()
    t.teardown(() => page.close())
    page.setDefaultTimeout(10_000)
    await page.setViewport({ width: 1400, height: 900 })
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
    const sandbox = await createSandbox({ retryDelay: 5, maxAttempts: 1, deliveryTimeout: 5000, customerHandle: 'acme' })
    t.teardown(() => sandbox.close())
    return sandbox
  }

  t.test('sandbox page: send from the page, see the verdict live, read the detail, spot a tampered delivery', { timeout: 30_000 }, async (t) => {
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

  t.test('inspect page: deliveries sent from the sandbox page show with the library\'s verdict', { timeout: 30_000 }, async (t) => {
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

  t.test('without the key the page shows nothing but asks for it; a wrong key is refused', { timeout: 20_000 }, async (t) => {
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
}
