// The published package, as a user gets it: `npm pack` on a copy of the sources (so the
// `prepack` script builds dist/ the way `npm publish` and a git install do), installed into an
// empty project with no network and scripts allowed, then imported, required, type-checked under
// every moduleResolution a user may have, and its CLI run through node_modules/.bin.
import { execFile, spawn } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import t from 'tap'

// npm pack runs prepack (a full build), then tsc under five moduleResolution settings: minutes of
// CPU on a busy 2-core machine. A deadline for hangs only; every step has its own bound below.
t.setTimeout(300_000)

const run = promisify(execFile)
const root = fileURLToPath(new URL('../../', import.meta.url))
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
  name: string
  version: string
  license: string
  dependencies: Record<string, string>
  exports: Record<string, unknown>
  files: string[]
  scripts: Record<string, string>
}
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm'
const tsc = path.join(root, 'node_modules/typescript/bin/tsc')
// A plain Node child: the test runner's loader must not stand in for the package's own files.
const env = { ...process.env, NODE_OPTIONS: '', NO_COLOR: '1', npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' }

// The subtests below share the installed package read-only and each writes its own folder, so two
// run at a time: the five type-checks are CPU-bound, and this file is among the last tap starts.
t.jobs = 2

const work = mkdtempSync(path.join(tmpdir(), 'mcw-pack-'))
t.teardown(() => { rmSync(work, { recursive: true, force: true }) })
const source = path.join(work, 'source')
const consumer = path.join(work, 'consumer')
let tarball = ''
let packedFiles: string[] = []
let installOutput = { stdout: '', stderr: '' }

t.before(async () => {
  // A copy of what a git checkout holds (no dist/), with the repository's node_modules for the build.
  mkdirSync(source)
  for (const entry of ['src', 'scripts', 'package.json', 'tsconfig.json', 'tsconfig.build.json', 'README.md', 'LICENSE', 'CHANGELOG.md']) {
    cpSync(path.join(root, entry), path.join(source, entry), { recursive: true })
  }
  symlinkSync(path.join(root, 'node_modules'), path.join(source, 'node_modules'), 'dir')
  const { stdout } = await run(npm, ['pack', '--json', '--pack-destination', work], { cwd: source, env, timeout: 120_000, maxBuffer: 16 << 20 })
  // npm prints the prepack script's output before the JSON.
  const info = JSON.parse(stdout.slice(stdout.indexOf('[\n'))) as Array<{ filename: string, files: Array<{ path: string }> }>
  tarball = path.join(work, info[0]!.filename)
  packedFiles = info[0]!.files.map((f) => f.path)

  // An empty project. The registry is not reachable from tests, so the package's own
  // dependencies are copied from this repository's node_modules and npm installs offline.
  mkdirSync(path.join(consumer, 'node_modules'), { recursive: true })
  writeFileSync(path.join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', private: true }))
  for (const dep of Object.keys(pkg.dependencies)) {
    cpSync(path.join(root, 'node_modules', dep), path.join(consumer, 'node_modules', dep), { recursive: true })
  }
  installOutput = await run(npm, ['install', '--offline', '--no-save', tarball], { cwd: consumer, env, timeout: 120_000 })
  // Peers and type packages a user would have installed for the subpaths they use.
  for (const peer of ['fastify', 'express', 'hono', 'bullmq', 'ioredis', '@nestjs/common', '@nestjs/core', '@types/node', '@types/express']) {
    const target = path.join(consumer, 'node_modules', peer)
    mkdirSync(path.dirname(target), { recursive: true })
    if (!existsSync(target)) symlinkSync(path.join(root, 'node_modules', peer), target, 'dir')
  }
})

t.test('the tarball holds the built package, its licence and the sources its maps point to', async (t) => {
  t.ok(packedFiles.includes('dist/index.js'), 'dist/ is built by the prepack script')
  t.ok(packedFiles.includes('dist/index.d.ts'), 'type declarations')
  t.ok(packedFiles.includes('LICENSE'), 'LICENSE')
  t.ok(packedFiles.includes('README.md'), 'README.md')
  t.notOk(packedFiles.some((f) => f.startsWith('test/') || f.startsWith('bench/') || f.startsWith('examples/')), 'no tests, benches or examples')
  t.match(readFileSync(path.join(root, 'LICENSE'), 'utf8'), /^MIT License/, `LICENSE matches "license": "${pkg.license}"`)
  t.equal(pkg.license, 'MIT')
  t.notOk(packedFiles.some((f) => f.startsWith('scripts/') || f.startsWith('.ci/') || /\.test\.[cm]?[jt]s$/.test(f) || f.endsWith('.tsbuildinfo')), 'no scripts, CI, test files or build state')
  t.strictSame(packedFiles.filter((f) => !/^(dist|src)\//.test(f)).sort(), ['CHANGELOG.md', 'LICENSE', 'README.md', 'package.json'], 'beside dist/ and src/: the changelog, licence, README and package.json')
  t.match(pkg.scripts.prepack, /npm run build/, 'publishing (and installing from git) builds dist/ first')

  const installed = path.join(consumer, 'node_modules', pkg.name)
  // The tarball ships dist/: it has nothing to run at install, so npm 11 lists nothing under
  // "install scripts not yet covered by allowScripts" (a `prepare` script was listed there).
  const { scripts = {}, bin } = JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8')) as { scripts?: Record<string, string>, bin?: Record<string, string> }
  t.strictSame(['preinstall', 'install', 'postinstall', 'prepare'].filter((s) => s in scripts), [], 'no install-time script in the published package.json')
  t.notMatch(installOutput.stderr, /install scripts|allowScripts/, `npm install of the tarball warns of no install script\n${installOutput.stderr}`)
  t.strictSame(bin, { [pkg.name]: 'dist/cli.js' }, 'bin as npm normalises it (npm publish would otherwise say it "auto-corrected" package.json)')
  const maps = packedFiles.filter((f) => f.endsWith('.map'))
  t.ok(maps.length > 0, 'source maps are shipped')
  const missing: string[] = []
  for (const map of maps) {
    const { sources } = JSON.parse(readFileSync(path.join(installed, map), 'utf8')) as { sources: string[] }
    for (const s of sources) {
      const file = path.resolve(path.dirname(path.join(installed, map)), s)
      if (!existsSync(file)) missing.push(`${map} -> ${s}`)
    }
  }
  t.strictSame(missing, [], 'every source a map names is in the package')
})

const SUBPATHS: Record<string, string[]> = {
  '': ['verifyWebhook', 'MailChannels', 'KeyStore', 'HTTP_STATUS_BY_TYPE', 'MemoryClaimStore', 'RedisClaimStore', 'WebhookEventRouter', 'DELIVERY_DIAGNOSTICS_CHANNEL'],
  '/fastify': ['default', 'mailchannelsWebhooks', 'batchesRoute'],
  '/express': ['mailchannelsWebhooks', 'captureRawBody', 'webhookEventsOf', 'batchesRoute'],
  '/testing': ['generateSigningKeyPair', 'signWebhook', 'createSandbox'],
  '/web': ['createWebhookHandler', 'verifyWebhookRequest', 'MemoryClaimStore'],
  '/hono': ['mailchannelsWebhooks'],
  '/bullmq': ['bullmqEnqueue', 'createWebhookEventQueue', 'createWebhookEventWorker'],
  // pg and better-sqlite3 are optional peers: the entries load without them.
  '/postgres': ['postgresSeenEvents', 'postgresSeenEventsSchema', 'PostgresSeenEventsStore'],
  '/sqlite': ['sqliteSeenEvents', 'SqliteSeenEventsStore'],
  // @nestjs/common and @nestjs/core are optional peers, installed here as a Nest app has them.
  '/nestjs': ['MailChannelsWebhooksModule', 'MailChannelsWebhook', 'WebhookEvents', 'OnWebhookEvent'],
}

t.test('every subpath imports with import and require, and the package verifies its own test kit\'s delivery', async (t) => {
  const script = `
    const subpaths = ${JSON.stringify(SUBPATHS)}
    ;(async () => {
      const out = {}
      for (const [sub, names] of Object.entries(subpaths)) {
        const id = '${pkg.name}' + sub
        const viaRequire = require(id)
        const viaImport = await import(id)
        out[id] = names.map((n) => [n, typeof viaImport[n], viaRequire[n] === viaImport[n]])
      }
      const { verifyWebhook } = require('${pkg.name}')
      const { generateSigningKeyPair, signWebhook } = await import('${pkg.name}/testing')
      const keys = generateSigningKeyPair()
      const signed = signWebhook({ events: [{ event: 'delivered', customer_handle: 'acct_1', timestamp: 1 }], privateKey: keys.privateKey })
      const result = await verifyWebhook({ payload: signed.body, headers: signed.headers, publicKey: keys.publicKey, customerHandles: ['acct_1'] })
      out.verified = result.error === null ? result.data.map((e) => e.event) : result.error.type
      process.stdout.write(JSON.stringify(out))
    })().catch((err) => { process.stderr.write(String(err && err.stack || err)); process.exit(1) })`
  const { stdout } = await run(process.execPath, ['-e', script], { cwd: consumer, env, timeout: 30_000 })
  const out = JSON.parse(stdout) as Record<string, unknown>
  for (const [sub, names] of Object.entries(SUBPATHS)) {
    const got = out[pkg.name + sub] as Array<[string, string, boolean]>
    for (const [name, type, same] of got) {
      t.not(type, 'undefined', `${pkg.name}${sub}: ${name} is exported`)
      t.ok(same, `${pkg.name}${sub}: require and import give the same ${name}`)
    }
    t.strictSame(got.map((g) => g[0]), names)
  }
  t.strictSame(out.verified, ['delivered'], 'the installed package verifies a signed delivery')
})

const CONSUMER_TS = `
import { verifyWebhook, MailChannels, type WebhookEvent, type ErrorResponse } from '${pkg.name}'
import mailchannelsWebhooks, { batchesRoute } from '${pkg.name}/fastify'
import { mailchannelsWebhooks as expressWebhooks } from '${pkg.name}/express'
import { signWebhook, generateSigningKeyPair, createSandbox } from '${pkg.name}/testing'
import { createWebhookHandler, verifyWebhookRequest, type WebhookHandler } from '${pkg.name}/web'
import { mailchannelsWebhooks as honoWebhook, type MailChannelsWebhooksEnv } from '${pkg.name}/hono'
import { Hono } from 'hono'

const keys = generateSigningKeyPair()
const signed = signWebhook({ events: [], privateKey: keys.privateKey })
export async function check (): Promise<WebhookEvent[] | ErrorResponse> {
  const r = await verifyWebhook({ payload: signed.body, headers: signed.headers, publicKey: keys.publicKey, customerHandles: ['a'] })
  return r.error ?? r.data
}
export const client: MailChannels = new MailChannels('key')
export const plugin: typeof mailchannelsWebhooks = mailchannelsWebhooks
export const route: typeof batchesRoute = batchesRoute
export const middleware: typeof expressWebhooks = expressWebhooks
export const sandbox: typeof createSandbox = createSandbox
export const handler: WebhookHandler = createWebhookHandler({ customerHandles: ['a'], publicKey: keys.publicKey, onEvents: (events: WebhookEvent[]) => { void events } })
export const verifyRequest: typeof verifyWebhookRequest = verifyWebhookRequest
export const app = new Hono<MailChannelsWebhooksEnv>().post('/hook', honoWebhook({ customerHandles: ['a'] }), (c) => c.json(c.get('webhookEvents').length))
// @ts-expect-error onEvents is required
export const noHandler = createWebhookHandler({ customerHandles: ['a'] })
// A wrong type must be an error: proves the declarations were found, not replaced by any.
// @ts-expect-error customerHandles takes strings
export const wrong: Parameters<typeof verifyWebhook>[0] = { payload: signed.body, headers: signed.headers, customerHandles: [1] }
`

const RESOLUTIONS: Array<{ name: string, module: string, moduleResolution: string, type?: 'module' }> = [
  { name: 'node16', module: 'node16', moduleResolution: 'node16', type: 'module' },
  { name: 'nodenext', module: 'nodenext', moduleResolution: 'nodenext', type: 'module' },
  { name: 'nodenext (CommonJS project)', module: 'nodenext', moduleResolution: 'nodenext' },
  { name: 'bundler', module: 'esnext', moduleResolution: 'bundler' },
  { name: 'node10 (through typesVersions)', module: 'commonjs', moduleResolution: 'node10' },
]

for (const r of RESOLUTIONS) {
  t.test(`types resolve for every subpath under moduleResolution ${r.name}`, async (t) => {
    const dir = mkdtempSync(path.join(consumer, 'ts-'))
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ private: true, ...(r.type === undefined ? {} : { type: r.type }) }))
    writeFileSync(path.join(dir, 'index.ts'), CONSUMER_TS)
    writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
      compilerOptions: {
        module: r.module,
        moduleResolution: r.moduleResolution,
        target: 'es2022',
        strict: true,
        noEmit: true,
        skipLibCheck: true,
        types: ['node'],
        ...(r.moduleResolution === 'node10' ? { ignoreDeprecations: '5.0', esModuleInterop: true } : {}),
      },
      files: ['index.ts'],
    }))
    const result = await run(process.execPath, [tsc, '-p', dir], { cwd: dir, env, timeout: 60_000 }).then(() => ({ code: 0, out: '' }), (err: { code?: number, stdout?: string }) => ({ code: err.code ?? 1, out: err.stdout ?? '' }))
    t.equal(result.code, 0, 'tsc finds the declarations and the consumer type-checks')
    t.equal(result.out, '', 'no type errors')
  })
}

t.test('the CLI runs from node_modules/.bin with --help and --version', async (t) => {
  const bin = path.join(consumer, 'node_modules', '.bin', pkg.name)
  t.ok(existsSync(bin), 'npm linked the bin')
  const help = await run(bin, ['--help'], { cwd: consumer, env, timeout: 30_000 })
  t.match(help.stdout, /sandbox/, '--help lists the sandbox command')
  const version = await run(bin, ['--version'], { cwd: consumer, env, timeout: 30_000 })
  t.equal(version.stdout.trim(), pkg.version, '--version prints the package version')
})

t.test('the installed sandbox serves its inspector page and script', async (t) => {
  const bin = path.join(consumer, 'node_modules', '.bin', pkg.name)
  const state = mkdtempSync(path.join(tmpdir(), 'mcwh-state-'))
  t.teardown(() => { rmSync(state, { recursive: true, force: true }) })
  const child = spawn(bin, ['sandbox', '--port', '0'], { cwd: consumer, env: { ...env, XDG_STATE_HOME: state }, stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => { child.kill('SIGKILL') })
  let out = ''
  child.stdout.setEncoding('utf8')
  const link = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => { reject(new Error(`no inspector link printed within 20 s: ${out}`)) }, 20_000)
    child.stdout.on('data', (chunk: string) => {
      out += chunk
      const m = /(http:\/\/127\.0\.0\.1:\d+)\/#key=/.exec(out)
      if (m !== null) { clearTimeout(timer); resolve(m[1]!) }
    })
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`the sandbox exited (${code}): ${out}`)) })
  })
  const page = await fetch(`${link}/`)
  t.equal(page.status, 200)
  t.match(page.headers.get('content-type'), /^text\/html/)
  t.match(await page.text(), /inspector/i)
  const script = await fetch(`${link}/inspector/app.js`)
  t.equal(script.status, 200)
  t.match(script.headers.get('content-type'), /javascript/)
  t.ok((await script.text()).length > 1000, 'the page script is shipped in the package')
})

t.test('the installed package needs nothing outside it', async (t) => {
  const installed = path.join(consumer, 'node_modules', pkg.name)
  const top = readdirSync(installed).sort()
  t.strictSame(top, ['CHANGELOG.md', 'LICENSE', 'README.md', 'dist', 'package.json', 'src'])
})
