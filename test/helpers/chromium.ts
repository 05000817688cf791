// Where the headless browser of the page tests is ($CHROMIUM, else Debian's chromium package), and
// how it starts.
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import puppeteer, { type Browser, type Page } from 'puppeteer-core'

export function findChromium (): string | null {
  if (process.env.CHROMIUM !== undefined && process.env.CHROMIUM !== '') return process.env.CHROMIUM
  if (existsSync('/usr/bin/chromium')) return '/usr/bin/chromium'
  try {
    return execFileSync('which', ['chromium'], { encoding: 'utf8' }).trim() || null
  } catch {
    return null
  }
}

/**
 * How long a browser step (the launch, a navigation, a wait for an element) may take before it is
 * taken for hung. A deadline for hangs, not a timing: the steps return as soon as they are done.
 * A fresh machine's first Chromium start builds its font cache, and four test files at once on two
 * cores make every step several times slower than alone.
 */
export const BROWSER_STEP_MS = 60_000

/**
 * Starts headless Chromium on a fresh profile (puppeteer's own temporary folder) with nothing of
 * its own to do on the network: no component updates, sync, first-run or background requests,
 * which a machine without Internet access refuses or leaves hanging at every start. Everything the
 * tests open is on 127.0.0.1.
 */
export function launchChromium (executablePath: string): Promise<Browser> {
  return puppeteer.launch({
    executablePath,
    headless: true,
    timeout: BROWSER_STEP_MS,
    protocolTimeout: BROWSER_STEP_MS * 2,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
  })
}

/** Gives a page the step deadline: every wait and navigation on it. */
export function withStepDeadline (page: Page): Page {
  page.setDefaultTimeout(BROWSER_STEP_MS)
  page.setDefaultNavigationTimeout(BROWSER_STEP_MS)
  return page
}
