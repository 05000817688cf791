// Where the headless browser of the page tests is: $CHROMIUM, else Debian's chromium package.
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'

export function findChromium (): string | null {
  if (process.env.CHROMIUM !== undefined && process.env.CHROMIUM !== '') return process.env.CHROMIUM
  if (existsSync('/usr/bin/chromium')) return '/usr/bin/chromium'
  try {
    return execFileSync('which', ['chromium'], { encoding: 'utf8' }).trim() || null
  } catch {
    return null
  }
}
