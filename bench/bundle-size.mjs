// Bundle size of each package entry as a Worker bundler builds it: esbuild, platform browser,
// conditions workerd,worker,browser, minified, node:* and the peer dependencies left external (a
// Node-only entry keeps its node: imports; fastify, hono, bullmq... are the user's own). Prints minified and gzip bytes per entry and the largest inputs of each bundle
// (esbuild's metafile), plus the web verify path alone: a Worker importing only verifyWebhookRequest.
//
//   node bench/bundle-size.mjs            # from dist/ (what a user's bundler takes; build first)
//   node bench/bundle-size.mjs --source   # from src/ (the mcwh-web-source condition), no build needed
//   node bench/bundle-size.mjs --json     # machine-readable
//   node bench/bundle-size.mjs --root <dir>  # another build: a folder with its package.json, dist/ and node_modules
//   node bench/bundle-size.mjs --shares   # the web verify bundle only: each input's share of the gzip size
//   node bench/bundle-size.mjs --peers    # the web verify bundle beside its peers, bundled the same way
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { gzipSync } from 'node:zlib'
import * as esbuild from 'esbuild'

const ROOT = fileURLToPath(new URL('../', import.meta.url))
const PKG = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'))
export const CONDITIONS = ['workerd', 'worker', 'browser']

/** What a Worker that only verifies imports. */
export const WEB_VERIFY = { name: 'web verifyWebhookRequest', code: "export { verifyWebhookRequest } from 'mailchannels-webhooks/web'" }

/**
 * What the web verify bundle is compared with, each bundled exactly as it is. A package
 * that is not installed here is reported with the figure the issue measured by the same method.
 */
export const PEERS = [
  { name: 'hand-written Ed25519 + digest receiver with a defended key fetch (bench/lib/edge-anchor.mjs)', code: "export { verify } from './bench/lib/edge-anchor.mjs'" },
  { name: 'standardwebhooks `Webhook` (HMAC, a configured secret)', pkg: 'standardwebhooks', issue: 4.9, code: "export { Webhook } from 'standardwebhooks'" },
  { name: 'jose `importSPKI` + `compactVerify` (a configured key)', pkg: 'jose', issue: 5.5, code: "export { importSPKI, compactVerify } from 'jose'" },
  { name: 'jose `createRemoteJWKSet` + `jwtVerify` (remote keys: fetch, cache, cooldown, timeout; JWT claims)', pkg: 'jose', issue: 7.1, code: "export { createRemoteJWKSet, jwtVerify } from 'jose'" },
]

/** Every entry of package.json "exports", imported whole. */
export function entries () {
  return Object.keys(PKG.exports)
    .filter((key) => key !== './package.json')
    .map((key) => {
      const specifier = 'mailchannels-webhooks' + key.slice(1)
      return { name: key, code: `export * from '${specifier}'` }
    })
}

/** Maps the package's own specifiers to its TypeScript sources (as the mcwh-web-source condition does for #crypto). */
const fromSource = {
  name: 'mcwh-source',
  setup (build) {
    build.onResolve({ filter: /^mailchannels-webhooks(\/|$)/ }, (args) => {
      const sub = '.' + args.path.slice('mailchannels-webhooks'.length)
      const target = PKG.exports[sub]
      const file = typeof target === 'string' ? target : target?.default
      if (file === undefined) return { errors: [{ text: `no export ${sub}` }] }
      return { path: path.join(ROOT, file.replace(/^\.\/dist\//, 'src/').replace(/\.js$/, '.ts')) }
    })
  },
}

/**
 * Bundles `code` (resolved from the repository root) and measures it.
 * @returns {Promise<{ minified: number, gzip: number, inputs: Array<{ path: string, bytes: number }> }>}
 */
export async function measure (code, { source = false, root = ROOT } = {}) {
  const { bytes: out, metafile } = await bundle(code, { source, root })
  const meta = Object.values(metafile.outputs)[0]
  const inputs = Object.entries(meta.inputs)
    .map(([file, info]) => ({ path: file.replace(/^.*node_modules\//, 'node_modules/'), bytes: info.bytesInOutput }))
    .filter((i) => i.bytes > 0)
    .sort((a, b) => b.bytes - a.bytes)
  return { minified: out.byteLength, gzip: gzipSync(out, { level: 9 }).byteLength, inputs }
}

/**
 * The bundle itself: one ES module with no imports but node:* and the peer dependencies.
 * `root`: the package folder the specifiers resolve in (another build's copy, for a baseline).
 * @returns {Promise<{ bytes: Uint8Array, text: string, metafile: import('esbuild').Metafile }>}
 */
export async function bundle (code, { source = false, root = ROOT, minifyWhitespace = true } = {}) {
  const result = await esbuild.build({
    stdin: { contents: code, resolveDir: root, loader: 'js', sourcefile: 'worker.js' },
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    conditions: source ? ['mcwh-web-source', ...CONDITIONS] : CONDITIONS,
    minifySyntax: true,
    minifyIdentifiers: true,
    minifyWhitespace,
    metafile: true,
    target: 'es2022',
    logLevel: 'silent',
    // Peer dependencies (fastify, hono, bullmq, pg...) are the user's: measured is this package's share.
    external: ['node:*', ...Object.keys(PKG.peerDependencies ?? {})],
    plugins: source ? [fromSource] : [],
  })
  return { bytes: result.outputFiles[0].contents, text: result.outputFiles[0].text, metafile: result.metafile }
}

/**
 * What each input costs in the gzip size of the bundle of `code`: the gzip bytes of the whole bundle
 * minus those of the bundle without that input's code (gzip finds repeats across modules, so the
 * shares add up to less than the whole). esbuild marks each input's code with a comment when
 * whitespace is kept; the pieces are then minified as the bundle is.
 * @returns {Promise<{ gzip: number, shares: Array<{ path: string, bytes: number }> }>}
 */
export async function gzipShares (code, { source = false, root = ROOT } = {}) {
  const { text } = await bundle(code, { source, root, minifyWhitespace: false })
  const pieces = text.split(/^(?=\/\/ \S+\.[jt]s\n)/m)
  const squeeze = async (js) => gzipSync((await esbuild.transform(js, { minifyWhitespace: true, loader: 'js' })).code, { level: 9 }).byteLength
  const gzip = await squeeze(text)
  const shares = []
  for (let i = 0; i < pieces.length; i++) {
    const name = /^\/\/ (\S+)\n/.exec(pieces[i])?.[1]
    if (name === undefined) continue // the bundle's own runtime helpers
    shares.push({ path: name.replace(/^.*node_modules\//, 'node_modules/'), bytes: gzip - await squeeze(pieces.filter((_, j) => j !== i).join('')) })
  }
  return { gzip, shares: shares.sort((a, b) => b.bytes - a.bytes) }
}

const kb = (n) => (n / 1000).toFixed(1) + ' KB'

async function main () {
  const source = process.argv.includes('--source')
  const json = process.argv.includes('--json')
  const at = process.argv.indexOf('--root')
  const root = at === -1 ? ROOT : path.resolve(process.argv[at + 1])
  if (process.argv.includes('--peers')) {
    const rows = []
    for (const peer of [WEB_VERIFY, ...PEERS]) {
      try {
        const r = await measure(peer.code, { source, root })
        rows.push({ name: peer.name, minified: r.minified, gzip: r.gzip })
      } catch (err) {
        if (peer.pkg === undefined) throw err
        rows.push({ name: peer.name, error: `${peer.pkg} is not installed here; the issue measured ${peer.issue} KB gzip by this method` })
      }
    }
    const lines = [`esbuild ${esbuild.version}, platform browser, conditions ${CONDITIONS.join(',')}, minified, gzip -9`, '',
      '| Worker that verifies | minified | gzip |', '|---|---:|---:|',
      ...rows.map((r) => r.error !== undefined ? `| ${r.name} | - | ${r.error} |` : `| ${r.name} | ${kb(r.minified)} | ${kb(r.gzip)} (${r.gzip} B) |`)]
    process.stdout.write((json ? JSON.stringify(rows, null, 2) : lines.join('\n')) + '\n')
    return
  }
  if (process.argv.includes('--shares')) {
    const { gzip, shares } = await gzipShares(WEB_VERIFY.code, { source, root })
    const lines = [`${WEB_VERIFY.name}: ${gzip} bytes gzip; each input's share (the bundle's gzip bytes without it, subtracted from the whole)`, '',
      '| input | gzip bytes |', '|---|---:|', ...shares.map((s) => `| ${s.path} | ${s.bytes} |`)]
    process.stdout.write((json ? JSON.stringify({ gzip, shares }, null, 2) : lines.join('\n')) + '\n')
    return
  }
  const rows = []
  for (const entry of [WEB_VERIFY, ...entries()]) {
    try {
      rows.push({ entry: entry.name, ...(await measure(entry.code, { source, root })) })
    } catch (err) {
      rows.push({ entry: entry.name, error: String(err?.errors?.[0]?.text ?? err) })
    }
  }
  if (json) {
    process.stdout.write(JSON.stringify(rows, null, 2) + '\n')
    return
  }
  const lines = [`esbuild ${esbuild.version}, platform browser, conditions ${CONDITIONS.join(',')}, minified, gzip -9; from ${source ? 'src/' : path.relative(process.cwd(), path.join(root, 'dist')) + '/'}`, '',
    '| entry | minified | gzip | largest inputs (bytes in output) |', '|---|---:|---:|---|']
  for (const r of rows) {
    if (r.error !== undefined) { lines.push(`| \`${r.entry}\` | - | - | ${r.error} |`); continue }
    const top = r.inputs.slice(0, 4).map((i) => `${i.path} ${kb(i.bytes)}`).join(', ')
    lines.push(`| \`${r.entry}\` | ${kb(r.minified)} | ${kb(r.gzip)} | ${top} |`)
  }
  process.stdout.write(lines.join('\n') + '\n')
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main()
