// Regenerates the inspector screenshots in docs/ (the README shows them):
//   node --conditions=mcwh-source --import tsx scripts/inspector-screenshots.mjs [outDir]
// A sandbox delivers to `inspect`'s endpoint on loopback: genuine batches, a tampered body, an
// expired signature, a replay and a resend. Headless Chromium (CHROMIUM, else /usr/bin/chromium
// or `chromium` on the PATH) takes the list and a detail view of the sandbox's page, and the
// receiving side's page in dark mode.
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import puppeteer from 'puppeteer-core'
import { createSandbox } from '../src/testing/index.ts'
import { createInspector } from '../src/testing/inspector/index.ts'

const root = fileURLToPath(new URL('../', import.meta.url))
const outDir = path.resolve(process.argv[2] ?? path.join(root, 'docs'))
mkdirSync(outDir, { recursive: true })

function chromium () {
  if (process.env.CHROMIUM) return process.env.CHROMIUM
  if (existsSync('/usr/bin/chromium')) return '/usr/bin/chromium'
  try {
    return execFileSync('which', ['chromium'], { encoding: 'utf8' }).trim()
  } catch {
    throw new Error('Chromium not found: install it (Debian: apt-get install chromium) or set CHROMIUM')
  }
}

const sandbox = await createSandbox({ retryDelay: 50, maxAttempts: 2, customerHandle: 'acme' })
const inspector = await createInspector({ baseUrl: sandbox.baseUrl, customerHandles: ['acme'] })
const browser = await puppeteer.launch({ executablePath: chromium(), headless: true, args: ['--no-sandbox'] })
try {
  sandbox.enroll(`${inspector.url}/webhooks`)
  await sandbox.deliver()
  await sandbox.deliver(undefined, { tamper: 'body' })
  await sandbox.deliver(undefined, { tamper: 'replay' })
  const batch = await sandbox.deliver()
  await sandbox.deliver(undefined, { tamper: 'expired' })
  await sandbox.resend(batch.batch_id)

  const page = await browser.newPage()
  await page.setViewport({ width: 1440, height: 640, deviceScaleFactor: 1 })
  await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'light' }])
  await page.goto(sandbox.inspectorUrl, { waitUntil: 'load' })
  await page.waitForSelector('#list tbody tr:nth-child(6)')
  // One more, sent from the page itself: two chosen event types.
  await page.$$eval('#type-list input', (inputs) => inputs.forEach((i) => { i.checked = ['delivered', 'hard-bounced'].includes(i.value) }))
  await page.click('#send')
  await page.waitForSelector('#list tbody tr:nth-child(7)')
  await page.waitForFunction(() => /sent|answered/.test(document.getElementById('status').textContent))
  await page.screenshot({ path: path.join(outDir, 'inspector-list.png') })

  // The tampered body: its reason, its headers, the signature base and the digest that no longer matches.
  const rejected = await page.$$('#list tbody tr[data-outcome="rejected"] button')
  await rejected.at(-1).click()
  await page.waitForSelector('#detail-reason')
  await page.setViewport({ width: 1440, height: 1500, deviceScaleFactor: 1 })
  await page.evaluate(() => document.querySelector('.split').scrollIntoView())
  const split = await page.$('.split')
  await split.screenshot({ path: path.join(outDir, 'inspector-detail.png') })

  const receiving = await browser.newPage()
  await receiving.setViewport({ width: 1440, height: 430, deviceScaleFactor: 1 })
  await receiving.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'dark' }])
  await receiving.goto(inspector.pageUrl, { waitUntil: 'load' })
  await receiving.waitForSelector('#list tbody tr:nth-child(7)')
  await receiving.screenshot({ path: path.join(outDir, 'inspector-receiver.png') })
  console.log(`wrote inspector-list.png, inspector-detail.png and inspector-receiver.png in ${outDir}`)
} finally {
  await browser.close()
  await sandbox.close()
  await inspector.close()
}
