// README.md, pasted in order into a fresh project, works as written. Every fenced block of the
// README carries a marker on the line before it, so a new block cannot go untested silently:
//   <!-- readme-test: pack -->                    installing from a clone: `npm pack`, then the tarball
//   <!-- readme-test: install -->                 `npm install` lines: the packages the project gets
//   <!-- readme-test: typecheck [file=NAME] -->   TypeScript, type-checked in the fresh project (as NAME),
//                                                 then run against a sandbox (see "every program")
//   <!-- readme-test: quickstart -->              the "Try it with no account" commands, run in order
//   <!-- readme-test: skip (why) -->              not run here, with the reason
// The fresh project is a temp folder whose node_modules holds exactly the packages the install
// blocks name: `mailchannels-webhooks` a link to this repository (its built dist/), the others
// links into this repository's node_modules (nothing is downloaded: npm runs with --offline).
// The quick start runs on loopback with the README's ports swapped for free ones (so parallel
// runs cannot collide), the sandbox's state file in the temp folder, every process bounded in
// time and killed by its process group at teardown.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import pg from 'pg'
import t, { type Test } from 'tap'
import { ROOT } from '../runtimes/helpers/runtimes.js'
import { waitForOutput } from '../examples/helpers/readme-flow.js'
import { startPostgres, postgresBinDir } from '../helpers/postgres.js'
import { startRedisServer } from '../replay/helpers/redis-server.js'
import { PORT_RANGES, serverPorts } from '../helpers/server-ports.js'

t.setTimeout(300_000)

const README = readFileSync(path.join(ROOT, 'README.md'), 'utf8')
const PACKAGE = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { name: string, version: string, repository: { url: string }, scripts: Record<string, string> }

/** Names the README's snippets leave to the reader ("`suppress` and `track` are yours to write"). */
const PRELUDE = `// The functions README.md leaves to its reader ("Handle events": yours to write).
import type { ClickEvent, OpenEvent } from 'mailchannels-webhooks'
declare global {
  function suppress (recipients: readonly string[], reason?: string): Promise<void>
  function track (event: OpenEvent | ClickEvent): Promise<void>
}
export {}
`
const PRELUDE_NAMES = ['suppress', 'track']

interface Block {
  kind: 'pack' | 'install' | 'typecheck' | 'quickstart' | 'skip'
  lang: string
  body: string
  /** `file=NAME` of a typecheck block. */
  file: string | undefined
  /** 1-based line of the opening fence. */
  line: number
}

/** Every fenced block of the README with its marker; a block without one is reported. */
function readmeBlocks (text: string): { blocks: Block[], unmarked: number[] } {
  const lines = text.split('\n')
  const blocks: Block[] = []
  const unmarked: number[] = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i]!)
    if (open === null) continue
    const end = lines.findIndex((l, j) => j > i && /^```\s*$/.test(l))
    if (end === -1) throw new Error(`README.md line ${i + 1}: a code block that never closes`)
    let m = i - 1
    while (m >= 0 && lines[m]!.trim() === '') m--
    const marker = m >= 0 ? /^<!-- readme-test: (pack|install|typecheck|quickstart|skip)\b(.*?)-->\s*$/.exec(lines[m]!) : null
    if (marker === null) unmarked.push(i + 1)
    else {
      const file = /\bfile=(\S+)/.exec(marker[2]!)?.[1]
      blocks.push({ kind: marker[1] as Block['kind'], lang: open[1]!, body: lines.slice(i + 1, end).join('\n'), file, line: i + 1 })
    }
    i = end
  }
  return { blocks, unmarked }
}

/** One shell line: leading `NAME=value` words, then the command's words (no quoting in the README). */
interface CommandLine { env: Record<string, string>, argv: string[], text: string }

function commandLines (body: string): CommandLine[] {
  return body.split('\n')
    .map((l) => l.replace(/(^|\s)#.*$/, '').trim())
    .filter((l) => l !== '')
    .flatMap((l) => l.split('&&').map((part) => part.trim()))
    .map((text) => {
      const words = text.split(/\s+/)
      const env: Record<string, string> = {}
      while (words.length > 0 && /^[A-Z_][A-Z0-9_]*=/.test(words[0]!)) {
        const word = words.shift()!
        env[word.slice(0, word.indexOf('='))] = word.slice(word.indexOf('=') + 1)
      }
      return { env, argv: words, text }
    })
}

const { blocks, unmarked } = readmeBlocks(README)

t.test('every code block of README.md says how this test treats it', async (t) => {
  t.strictSame(unmarked, [], 'blocks with no <!-- readme-test: ... --> marker on the line before (README.md lines)')
  for (const b of blocks) {
    if (b.kind === 'skip') t.match(README.split('\n')[b.line - 2] ?? '', /skip \(.+\)/, `line ${b.line}: a skipped block says why`)
    if (b.kind === 'typecheck') t.match(b.lang, /^tsx?$/, `line ${b.line}: a typecheck block is TypeScript`)
  }
  t.equal(blocks.filter((b) => b.kind === 'quickstart').length, 1, 'one quick start')
  for (const name of PRELUDE_NAMES) {
    t.match(README, new RegExp(`\`${name}\`[^.]*yours to write`), `the README says \`${name}\` is the reader's to define`)
  }
})

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug (heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-')
}

t.test('every link of README.md to a file of the repository opens, at a heading that exists', async (t) => {
  const prose = README.replace(/^```[\s\S]*?^```/gm, '')
  const links = [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!).filter((l) => !/^[a-z]+:/.test(l))
  t.ok(links.length > 10, `${links.length} links`)
  for (const link of new Set(links)) {
    const [file = '', anchor] = link.split('#')
    const target = path.join(ROOT, file === '' ? 'README.md' : file)
    if (!t.ok(existsSync(target), `${link}: ${file || 'README.md'} exists`)) continue
    if (anchor === undefined) continue
    const headings = readFileSync(target, 'utf8').replace(/^```[\s\S]*?^```/gm, '').match(/^#{1,6} .*$/gm) ?? []
    t.ok(headings.some((h) => slug(h.replace(/^#+ /, '')) === anchor), `${link}: a heading '#${anchor}'`)
  }
})

t.test('installing from a clone: the commands build the package and install the tarball npm pack writes', async (t) => {
  const packs = blocks.filter((b) => b.kind === 'pack')
  t.equal(packs.length, 1, 'one block says how to install from a clone')
  const lines = commandLines(packs[0]!.body)
  const pkg = PACKAGE
  const tarball = `${pkg.name}-${pkg.version}.tgz`
  t.strictSame(lines.map((l) => l.argv.slice(0, 2).join(' ')), ['git clone', 'cd mailchannels-webhooks', 'npm ci', 'npm pack'], 'clone, build and pack')
  t.equal(lines[0]!.argv[2], pkg.repository.url.replace(/^git\+/, ''), 'the clone URL is package.json\'s repository')
  t.match(pkg.scripts.prepack, /npm run build/, 'npm pack builds dist/ first (prepack)')
  // What `npm pack` names its tarball (--dry-run: nothing is built or written).
  const scratch = mkdtempSync(path.join(tmpdir(), 'mcw-readme-pack-'))
  t.teardown(() => rmSync(scratch, { recursive: true, force: true }))
  const dry = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT, env: terminalEnv(scratch), encoding: 'utf8', timeout: 60_000 })
  const filename = (JSON.parse(dry.stdout.slice(dry.stdout.indexOf('['))) as Array<{ filename: string }>)[0]?.filename
  t.equal(filename, tarball, 'npm pack writes the file the README installs')
  const first = blocks.find((b) => b.kind === 'install')!
  t.equal(path.basename(commandLines(first.body)[0]!.argv[2]!), tarball, `the first install block installs ${tarball}`)
  t.equal(blocks.indexOf(packs[0]!) < blocks.indexOf(first), true, 'after building it')
  t.match(packs[0]!.body, `# builds dist/, writes ${tarball}`, 'the comment names it too')
  // That the tarball installs, imports and runs its CLI with no install script: test/package/tarball.test.ts.
})

/** The packages the README's install blocks name, in order. */
function installedPackages (): string[] {
  const names: string[] = []
  for (const b of blocks.filter((b) => b.kind === 'install')) {
    for (const line of commandLines(b.body)) {
      if (line.argv[0] !== 'npm' || (line.argv[1] !== 'install' && line.argv[1] !== 'i')) throw new Error(`README.md line ${b.line}: an install block holds '${line.text}'`)
      // The tarball `npm pack` writes in a clone ("Install"): the package itself.
      names.push(...line.argv.slice(2).filter((w) => !w.startsWith('-')).map((w) => w.endsWith('.tgz') ? PACKAGE.name : w))
    }
  }
  return names
}

/**
 * A fresh project: package.json, and node_modules with exactly the installed packages. Each is a
 * link (npm links a folder dependency the same way); each `bin` gets a shim in node_modules/.bin,
 * as npm writes one, so `npx <bin>` finds it locally.
 */
function freshProject (t: Test): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'mcw-readme-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'readme-project', private: true, type: 'module' }, null, 2))
  const modules = path.join(dir, 'node_modules')
  mkdirSync(path.join(modules, '.bin'), { recursive: true })
  for (const name of installedPackages()) {
    const source = name === 'mailchannels-webhooks' ? ROOT : path.join(ROOT, 'node_modules', name)
    if (!existsSync(path.join(source, 'package.json'))) throw new Error(`the README installs ${name}, which this repository's node_modules does not hold`)
    mkdirSync(path.dirname(path.join(modules, name)), { recursive: true })
    symlinkSync(source, path.join(modules, name), 'dir')
    const pkg = JSON.parse(readFileSync(path.join(source, 'package.json'), 'utf8')) as { name: string, bin?: string | Record<string, string> }
    const bins = typeof pkg.bin === 'string' ? { [pkg.name.split('/').pop()!]: pkg.bin } : (pkg.bin ?? {})
    for (const [bin, file] of Object.entries(bins)) {
      writeFileSync(path.join(modules, '.bin', bin), `#!/bin/sh\nexec node "${path.join(source, file)}" "$@"\n`, { mode: 0o755 })
    }
  }
  return dir
}

/** A terminal in the project: this process's environment less tap's, npm offline, state files here. */
function terminalEnv (dir: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env }
  delete env.NODE_OPTIONS
  for (const k of Object.keys(env)) if (k.startsWith('TAP') || k.startsWith('npm_')) delete env[k]
  return {
    ...env,
    NO_COLOR: '1',
    XDG_STATE_HOME: path.join(dir, '.state'),
    npm_config_offline: 'true',
    npm_config_update_notifier: 'false',
    npm_config_fund: 'false',
    npm_config_cache: path.join(dir, '.npm'),
    ...extra,
  }
}

/** Every child is killed after this long, whatever happens. */
const LIFETIME = 150_000

/** `exited` resolves with the exit code, or the signal that ended the process. */
interface Running { child: ChildProcess, output: () => string, exited: Promise<number | NodeJS.Signals | null> }

/** Starts a command line in its own process group, killed at teardown. */
function start (t: Test, dir: string, line: CommandLine): Running {
  const child = spawn(line.argv[0]!, line.argv.slice(1), { cwd: dir, env: terminalEnv(dir, line.env), stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  let output = ''
  const keep = (c: Buffer): void => { if (output.length < 512_000) output += c.toString() }
  child.stdout!.on('data', keep)
  child.stderr!.on('data', keep)
  const exited = new Promise<number | NodeJS.Signals | null>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)))
  const kill = (): void => { try { process.kill(-child.pid!, 'SIGKILL') } catch { /* already gone */ } }
  const killer = setTimeout(kill, LIFETIME)
  void exited.then(() => clearTimeout(killer))
  t.teardown(async () => { clearTimeout(killer); kill(); await exited })
  return { child, output: () => output, exited }
}

async function run (t: Test, dir: string, line: CommandLine, timeout = 60_000): Promise<{ code: number | NodeJS.Signals | null, output: string }> {
  const r = start(t, dir, line)
  const timer = setTimeout(() => { try { process.kill(-r.child.pid!, 'SIGKILL') } catch { /* gone */ } }, timeout)
  const code = await r.exited
  clearTimeout(timer)
  return { code, output: r.output() }
}

/**
 * A port for a child process's server: below the ephemeral range, where a port released by
 * `listen(0)` could be taken by any outgoing connection before the child listens on it.
 */
async function freePort (): Promise<number> {
  return (await serverPorts(PORT_RANGES.children))[0]!
}

async function listening (port: number, ms: number): Promise<boolean> {
  const end = Date.now() + ms
  while (Date.now() < end) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => { s.destroy(); resolve(true) })
      s.once('error', () => resolve(false))
    })
    if (ok) return true
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return false
}

t.test('README.md in a fresh project', async (t) => {
  // The package as a user gets it: the built dist/ (npm test builds first; alone, build once).
  if (!['index.js', 'cli.js', 'fastify/index.js', 'testing/index.js'].every((f) => existsSync(path.join(ROOT, 'dist', f)))) {
    spawnSync(process.execPath, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'pipe' })
  }
  const dir = freshProject(t)
  const snippets = blocks.filter((b) => b.kind === 'typecheck')
  snippets.forEach((b, i) => {
    // Each snippet is a module of its own, as pasted into its own file.
    writeFileSync(path.join(dir, b.file ?? `snippet-${i + 1}.ts`), `${b.body}\nexport {}\n`)
  })
  writeFileSync(path.join(dir, 'readme-prelude.d.ts'), PRELUDE)
  // The three parts below share the project read-only and use ports and state folders of their
  // own: side by side, the file takes as long as its longest part (most of the time is waiting).
  t.jobs = 3

  void t.test('the TypeScript snippets type-check, with Node\'s types and with the DOM\'s', async (t) => {
    const base = { target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, skipLibCheck: true, noEmit: true, types: ['node'] }
    writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions: { ...base, lib: ['es2023'] }, include: ['*.ts'] }))
    writeFileSync(path.join(dir, 'tsconfig.dom.json'), JSON.stringify({ compilerOptions: { ...base, lib: ['es2023', 'dom', 'dom.iterable'] }, include: ['*.ts'] }))
    const configs = ['tsconfig.json', 'tsconfig.dom.json']
    const results = await Promise.all(configs.map((config) => run(t, dir, { env: {}, argv: ['npx', 'tsc', '-p', config], text: `npx tsc -p ${config}` }, 120_000)))
    results.forEach((r, i) => {
      t.equal(r.code, 0, `npx tsc -p ${configs[i]} over ${snippets.length} snippets (README.md lines ${snippets.map((b) => b.line).join(', ')})\n${r.output}`)
    })
  })

  void t.test('"Try it with no account": the sandbox, the receiver, deliveries', async (t) => {
    const quick = blocks.find((b) => b.kind === 'quickstart')!
    const lines = commandLines(quick.body)
    t.equal(lines.length, 3, 'three commands')
    const [sandboxLine, receiverLine, enrollLine] = lines as [CommandLine, CommandLine, CommandLine]
    t.match(sandboxLine.text, /^npx mailchannels-webhooks sandbox --port \d+$/, 'the sandbox on a fixed port, kept running (no --count)')

    // The README's ports, swapped for free ones in every command.
    const readmeSandboxPort = sandboxLine.argv[sandboxLine.argv.indexOf('--port') + 1]!
    const readmeTarget = new URL(enrollLine.argv.find((w) => w.startsWith('http'))!)
    t.equal(receiverLine.env.MAILCHANNELS_BASE_URL, `http://127.0.0.1:${readmeSandboxPort}`, 'the receiver takes its keys from that sandbox')
    t.equal(readmeTarget.pathname, '/webhooks/mailchannels', 'deliveries go to the receiver\'s path')
    const receiverFile = receiverLine.argv.at(-1)!
    t.ok(existsSync(path.join(dir, receiverFile)), `${receiverFile} is a snippet of the README`)
    t.match(readFileSync(path.join(dir, receiverFile), 'utf8'), `path: '${readmeTarget.pathname}'`, 'the snippet declares that path')
    t.match(readFileSync(path.join(dir, receiverFile), 'utf8'), `process.env.PORT ?? ${readmeTarget.port}`, `the snippet listens on ${readmeTarget.port} unless PORT says otherwise`)
    const [sandboxPort, receiverPort] = await serverPorts(PORT_RANGES.children, 2) as [number, number]
    const swap = (line: CommandLine, extraEnv: Record<string, string> = {}): CommandLine => {
      const fix = (w: string): string => w.replace(`127.0.0.1:${readmeSandboxPort}`, `127.0.0.1:${sandboxPort}`).replace(`127.0.0.1:${readmeTarget.port}`, `127.0.0.1:${receiverPort}`)
      const argv = line.argv.map(fix)
      const p = argv.indexOf('--port')
      if (p !== -1 && argv[p + 1] === readmeSandboxPort) argv[p + 1] = String(sandboxPort)
      return { env: { ...Object.fromEntries(Object.entries(line.env).map(([k, v]) => [k, fix(v)])), ...extraEnv }, argv, text: line.text }
    }

    const sandbox = start(t, dir, swap(sandboxLine))
    t.ok(await waitForOutput(sandbox.output, (o) => /sandbox listening on[\s\S]*Press Ctrl-C to stop/.test(o), 30_000), `terminal 1: the sandbox starts\n${sandbox.output()}`)
    t.match(sandbox.output(), `customer handle  ${receiverLine.env.MAILCHANNELS_CUSTOMER_HANDLE}`, 'the receiver\'s customer handle is the sandbox\'s')

    const receiver = start(t, dir, swap(receiverLine, { PORT: String(receiverPort) }))
    t.ok(await listening(receiverPort, 60_000), `terminal 2: the receiver listens\n${receiver.output()}`)

    const enroll = await run(t, dir, swap(enrollLine))
    t.equal(enroll.code, 0, `terminal 3: ${enrollLine.text}\n${enroll.output}`)

    // The sandbox delivers about once a second: wait for two accepted batches.
    const accepted = (): number[] => [...sandbox.output().matchAll(/^batch\s+\d+\s+attempt\s+\d+\s+200 accepted\s+(\d+) events/gm)].map((m) => Number(m[1]))
    t.ok(await waitForOutput(sandbox.output, () => accepted().length >= 2, 30_000), `deliveries are accepted\n${sandbox.output()}`)
    const attempts = sandbox.output().match(/^batch\s+\d+\s+attempt\s+\d+.*$/gm) ?? []
    t.strictSame(attempts.filter((l) => !/\s200 accepted\s/.test(l)), [], 'every attempt was answered 200')
    const events = accepted().reduce((a, b) => a + b, 0)
    const handled = (): string[] => receiver.output().match(/^received [a-z-]+ event$/gm) ?? []
    t.ok(await waitForOutput(receiver.output, () => handled().length >= events, 10_000), `the receiver's handlers saw every event of the accepted deliveries (${events})\n${receiver.output()}`)
    t.match(receiver.output(), /^bounced: \S+@\S+/m, 'the hard-bounced handler ran with the recipients')

    // A refused delivery shows in the receiver's terminal (Fastify's logger): a POST with no signature.
    const refused = await fetch(`http://127.0.0.1:${receiverPort}${readmeTarget.pathname}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '[]' })
    t.ok(refused.status >= 400 && refused.status < 500, `an unsigned POST is refused (${refused.status})`)
    t.ok(await waitForOutput(receiver.output, (o) => o.includes(`"statusCode":${refused.status}`), 10_000), `terminal 2 shows the refused request with its status\n${receiver.output().slice(-2000)}`)

    // Ctrl-C in terminal 1 reaches the terminal's process group: npx ends by the signal, the
    // sandbox under it closes and sums up.
    process.kill(-sandbox.child.pid!, 'SIGINT')
    t.ok([0, 'SIGINT'].includes((await sandbox.exited)!), 'the sandbox stops on Ctrl-C')
    t.match(sandbox.output(), /summary: sent \d+ batch(es)? .*?[^0-9]([2-9]|\d\d+) accepted/, `the summary counts the accepted batches\n${sandbox.output()}`)
  })

  void t.test('every program of the README runs against one sandbox, as "Try it with no account" says to run it', async (t) => {
    const quick = commandLines(blocks.find((b) => b.kind === 'quickstart')!.body)
    const quickFile = quick[1]!.argv.at(-1)!
    const files = snippets.map((b, i) => ({ block: b, file: b.file ?? `snippet-${i + 1}.ts` }))
    const importedBy = (file: string): string | undefined => files.find((f) => f.block.body.includes(`from './${file.replace(/\.ts$/, '.js')}'`))?.file
    const programs: Array<{ file: string, entry: string, block: Block }> = []
    for (const { block, file } of files) {
      if (file === quickFile) continue // run by the quick start above
      if (/\.listen\(/.test(block.body)) programs.push({ file, entry: file, block })
      else if (/^export const handler = createWebhookHandler\(/m.test(block.body)) {
        // A Fetch API handler: served on Node as a platform would serve it.
        mkdirSync(path.join(dir, 'run'), { recursive: true })
        const entry = `run/serve-${file}`
        writeFileSync(path.join(dir, entry), `import { serve } from ${JSON.stringify(import.meta.resolve('@hono/node-server'))}\nimport { handler } from '../${file.replace(/\.ts$/, '.js')}'\nserve({ fetch: handler, hostname: '127.0.0.1', port: Number(process.env.PORT) })\n`)
        programs.push({ file, entry, block })
      } else {
        t.ok(importedBy(file) !== undefined, `README.md line ${block.line} (${file}): a program that listens, a Fetch handler, or a module another snippet imports, so it runs`)
      }
    }
    t.ok(programs.length >= 4, `programs: ${programs.map((p) => p.file).join(', ')}`)

    // What each program reads from its environment, given as terminal 2 would.
    const uses = (name: string): boolean => programs.some((p) => p.block.body.includes(name) || (p.block.body.match(/from '\.\/([\w-]+)\.js'/g) ?? []).some((m) => files.find((f) => m.includes(f.file.replace(/\.ts$/, '')))?.block.body.includes(name)))
    const [redis, postgres] = await Promise.all([
      uses('REDIS_URL') ? startRedisServer() : undefined,
      uses('DATABASE_URL') && postgresBinDir() !== undefined ? startPostgres() : undefined,
    ])
    t.teardown(async () => { await Promise.all([redis?.close(), postgres?.close()]) })
    if (uses('DATABASE_URL')) t.ok(postgres !== undefined, 'PostgreSQL is installed (CONTRIBUTING.md: apt-get install postgresql)')

    const sandboxPort = await freePort()
    // A state folder of its own: the quick start's sandbox runs beside this one.
    const ownState = { XDG_STATE_HOME: path.join(dir, '.state-programs') }
    const sandbox = start(t, dir, { env: ownState, argv: ['npx', 'mailchannels-webhooks', 'sandbox', '--port', String(sandboxPort)], text: 'sandbox' })
    t.ok(await waitForOutput(sandbox.output, (o) => /API key\s+\S+/.test(o) && /customer handle\s+\S+/.test(o), 30_000), `the sandbox starts\n${sandbox.output()}`)
    const apiKey = /API key\s+(\S+)/.exec(sandbox.output())![1]!
    const handle = /customer handle\s+(\S+)/.exec(sandbox.output())![1]!
    const sandboxUrl = `http://127.0.0.1:${sandboxPort}`

    // The functions README.md leaves to its reader, at run time: a line each, so the test sees them run.
    mkdirSync(path.join(dir, 'run'), { recursive: true })
    writeFileSync(path.join(dir, 'run', 'yours.mjs'), 'globalThis.suppress = async (recipients, reason) => { console.log(`suppress ${recipients.length} ${reason}`) }\nglobalThis.track = async (event) => { console.log(`track ${event.event}`) }\n')

    const running = await Promise.all(programs.map(async (p) => {
      const port = await freePort()
      const env: Record<string, string> = { ...ownState, PORT: String(port), MAILCHANNELS_BASE_URL: sandboxUrl, MAILCHANNELS_CUSTOMER_HANDLE: handle, NODE_OPTIONS: '--import ./run/yours.mjs' }
      if (redis !== undefined) env.REDIS_URL = `redis://127.0.0.1:${redis.port}`
      if (postgres !== undefined) env.DATABASE_URL = await postgres.createDatabase()
      const proc = start(t, dir, { env, argv: ['npx', 'tsx', p.entry], text: `npx tsx ${p.entry}` })
      return { ...p, port, proc, env, endpoint: `http://127.0.0.1:${port}/webhooks/mailchannels` }
    }))
    for (const r of running) {
      t.ok(await listening(r.port, 60_000), `${r.file} listens\n${r.proc.output()}`)
      const enrolled = await fetch(`${sandboxUrl}/tx/v1/webhook?endpoint=${encodeURIComponent(r.endpoint)}`, { method: 'POST', headers: { 'x-api-key': apiKey } })
      t.equal(enrolled.status, 201, `${r.file} enrolled`)
    }

    // The sandbox's own record of its deliveries to each program: two accepted, none refused.
    const batches = async (endpoint: string): Promise<Array<{ status: string, status_code: number | null }>> => {
      const res = await fetch(`${sandboxUrl}/tx/v1/webhook-batch?webhook=${encodeURIComponent(endpoint)}&limit=500`, { headers: { 'x-api-key': apiKey } })
      return ((await res.json()) as { webhook_batches: Array<{ status: string, status_code: number | null }> }).webhook_batches
    }
    for (const r of running) {
      let seen: Array<{ status: string, status_code: number | null }> = []
      const accepted = async (): Promise<boolean> => { seen = await batches(r.endpoint); return seen.filter((b) => b.status === '2xx_response').length >= 2 }
      const end = Date.now() + 60_000
      while (!(await accepted()) && Date.now() < end) await new Promise((resolve) => setTimeout(resolve, 200))
      t.ok(seen.filter((b) => b.status === '2xx_response').length >= 2, `${r.file}: deliveries accepted\n${JSON.stringify(seen)}\n${r.proc.output().slice(-3000)}`)
      t.strictSame(seen.filter((b) => b.status !== '2xx_response'), [], `${r.file}: no delivery refused or unanswered`)
    }

    // What each one did with the events.
    for (const r of running) {
      const out = r.proc.output
      if (r.file === 'verify.ts') t.ok(await waitForOutput(out, (o) => /^received hard-bounced event$/m.test(o), 10_000), `${r.file}: a line per verified event`)
      if (r.file === 'queue.ts') t.ok(await waitForOutput(out, (o) => /^suppress \d+ /m.test(o) && /^track (open|click)$/m.test(o), 30_000), `${r.file}: the workers ran the router's handlers (suppress, track)\n${out().slice(-3000)}`)
      if (r.file === 'fetch-handler.ts') t.ok(await waitForOutput(out, (o) => /^\d+ events$/m.test(o), 10_000), `${r.file}: onEvents ran`)
      if (r.file === 'inbox.ts') {
        const pool = new pg.Pool({ connectionString: r.env.DATABASE_URL, max: 1 })
        t.teardown(() => pool.end())
        const { rows } = await pool.query<{ n: string, reasons: string[] }>('SELECT count(*) AS n, array_agg(DISTINCT reason) AS reasons FROM suppressions')
        t.ok(Number(rows[0]!.n) > 0, `${r.file}: suppressions written in the events' transactions (${rows[0]!.n}: ${rows[0]!.reasons?.join(', ')})`)
      }
      // A refused delivery shows in its terminal (Fastify's logger, or the line verify.ts prints).
      if (/Fastify\(\{ logger: true/.test(r.block.body) || r.file === 'verify.ts') {
        const refused = await fetch(r.endpoint, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '[]' })
        t.ok(refused.status >= 400 && refused.status < 500, `${r.file}: an unsigned POST is refused (${refused.status})`)
        t.ok(await waitForOutput(out, (o) => o.includes(`"statusCode":${refused.status}`) || /^refused: [a-z_]+$/m.test(o), 10_000), `${r.file}: the refusal shows in its terminal\n${out().slice(-2000)}`)
      }
    }
  })
})
