// The size budget of a Worker that only verifies: `verifyWebhookRequest` from
// `mailchannels-webhooks/web`, bundled as bench/bundle-size.mjs does (esbuild, platform browser,
// conditions workerd,worker,browser, minified) from the sources. A size, not a speed: it keeps the
// verify path from growing back (docs/benchmarks.md has the figures, docs/design-notes.md why).
import t from 'tap'

interface Measured { minified: number, gzip: number, inputs: Array<{ path: string, bytes: number }> }
interface BundleSize {
  WEB_VERIFY: { code: string }
  measure: (code: string, options: { source: boolean }) => Promise<Measured>
}

/** Gzip bytes the web verify bundle may reach (measured 13,051 bytes from src/ when this budget was set). */
const BUDGET_GZIP = 13_180

t.test('a Worker importing only verifyWebhookRequest stays within its gzip budget and carries no general-purpose cache, hash or JSON library', async (t) => {
  const script = '../../bench/bundle-size.mjs'
  const { WEB_VERIFY, measure } = await import(script) as BundleSize
  const r = await measure(WEB_VERIFY.code, { source: true })
  const largest = r.inputs.slice(0, 5).map((i) => `${i.path} ${i.bytes}`).join(', ')
  t.ok(r.gzip <= BUDGET_GZIP, `${r.gzip} bytes gzip (budget ${BUDGET_GZIP}); largest inputs: ${largest}`)
  // The three packages the verify path no longer needs there: the key cache is src/keys/ttl-cache.ts,
  // the body digest is WebCrypto's, the prototype-poisoning check walks the parsed tree.
  for (const name of ['lru-cache', '@noble/hashes', 'secure-json-parse']) {
    t.notOk(r.inputs.some((i) => i.path.startsWith(`node_modules/${name}/`)), `no ${name} in the bundle`)
  }
  // `@signature-params` is serialised by signature-input.ts and the parser has its own Token: nothing of structured-headers, nor of any package.
  t.notOk(r.inputs.some((i) => i.path.startsWith('node_modules/')), `no package in the bundle (${r.inputs.filter((i) => i.path.startsWith('node_modules/')).map((i) => i.path).join(', ')})`)
  t.ok(r.inputs.some((i) => i.path.endsWith('src/web/index.ts')), 'the bundle is the web entry\'s (a sanity check of the measure)')
})
