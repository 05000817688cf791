// Text a user reads (CLI help, the demo's output) names only documents they can open: every
// Markdown file it mentions is in the repository, and no section sign points into one that is not.
import { existsSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

export function citesOnlyOpenable (t: Test, text: string, what: string): void {
  for (const doc of text.match(/[\w./-]+\.md\b/g) ?? []) t.ok(existsSync(path.join(ROOT, doc)), `${what}: ${doc} is in the repository`)
  t.notMatch(text, /§/, `${what}: no section of a document that is not here`)
}
