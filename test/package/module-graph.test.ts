// The package's main entry (`.`) and its web entry (`./web`) must run where there is no Node:
// every module they reach, resolved as a Worker / Deno / Bun / browser bundler resolves it,
// uses web-standard APIs only. This walks the module graph with the TypeScript parser and fails
// on any import of a Node built-in and, in this package's own code, on any Node-only global
// (`Buffer`, `process`, `require`...) that is not guarded by `typeof`.
import { existsSync, readFileSync } from 'node:fs'
import { builtinModules } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import ts from 'typescript'
import { importCycles, localImports, srcImportGraph } from '../helpers/import-graph.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const PKG = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  exports: Record<string, string | Record<string, string>>
  imports: Record<string, unknown>
}

/** What a Worker bundle (esbuild `conditions: ['workerd', 'worker', 'browser']`) resolves with. */
const WEB_CONDITIONS = ['workerd', 'worker', 'browser', 'import', 'default']
const NODE_GLOBALS = new Set(['Buffer', 'process', 'require', '__dirname', '__filename', 'setImmediate', 'clearImmediate', 'global', 'module'])
const BUILTINS = new Set(builtinModules)

/** Resolves a package.json `exports`/`imports` target for a set of conditions (first matching key wins). */
function pick (target: unknown, conditions: readonly string[]): string | undefined {
  if (typeof target === 'string') return target
  if (target === null || typeof target !== 'object') return undefined
  for (const [key, value] of Object.entries(target)) {
    if (key === 'default' || conditions.includes(key)) {
      const found = pick(value, conditions)
      if (found !== undefined) return found
    }
  }
  return undefined
}

interface Finding { file: string, what: string }

type Mode = 'source' | 'dist'

/** A package target (./dist/x.js) as the file to read: the TypeScript source in source mode. */
function ownFile (target: string, mode: Mode): string {
  const rel = mode === 'source' ? target.replace(/^\.\/dist\//, './src/').replace(/\.js$/, '.ts') : target
  return path.join(ROOT, rel)
}

function resolveDependency (specifier: string, fromDir: string): string | undefined {
  const parts = specifier.split('/')
  const name = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!
  const sub = '.' + specifier.slice(name.length)
  let dir = fromDir
  for (;;) {
    const candidate = path.join(dir, 'node_modules', name)
    if (existsSync(path.join(candidate, 'package.json'))) {
      const pkg = JSON.parse(readFileSync(path.join(candidate, 'package.json'), 'utf8')) as { exports?: unknown, module?: string, main?: string }
      let target: string | undefined
      if (pkg.exports !== undefined) {
        const exp = pkg.exports as Record<string, unknown>
        const keyed = typeof exp === 'object' && exp !== null && Object.keys(exp).some((k) => k.startsWith('.'))
        target = pick(keyed ? exp[sub] : sub === '.' ? exp : undefined, WEB_CONDITIONS)
      } else {
        target = sub === '.' ? (pkg.module ?? pkg.main ?? 'index.js') : sub
      }
      return target === undefined ? undefined : path.join(candidate, target)
    }
    const up = path.dirname(dir)
    if (up === dir) return undefined
    dir = up
  }
}

function walk (entries: string[], mode: Mode): { files: Set<string>, findings: Finding[] } {
  const files = new Set<string>()
  const findings: Finding[] = []
  const queue = [...entries]
  while (queue.length > 0) {
    const file = queue.pop()!
    if (files.has(file)) continue
    files.add(file)
    const own = file.startsWith(ROOT) && !file.includes(`${path.sep}node_modules${path.sep}`)
    const rel = path.relative(ROOT, file)
    if (!existsSync(file)) {
      findings.push({ file: rel, what: 'missing file' })
      continue
    }
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true, file.endsWith('.ts') ? ts.ScriptKind.TS : ts.ScriptKind.JS)
    const follow = (specifier: string): void => {
      if (specifier.startsWith('node:') || BUILTINS.has(specifier.split('/')[0]!)) {
        findings.push({ file: rel, what: `imports ${specifier}` })
        return
      }
      let target: string | undefined
      if (specifier.startsWith('.')) {
        target = path.resolve(path.dirname(file), mode === 'source' && own ? specifier.replace(/\.js$/, '.ts') : specifier)
      } else if (specifier.startsWith('#') && own) {
        const mapped = pick(PKG.imports[specifier], WEB_CONDITIONS)
        target = mapped === undefined ? undefined : ownFile(mapped, mode)
      } else {
        target = resolveDependency(specifier, path.dirname(file))
      }
      if (target === undefined) findings.push({ file: rel, what: `cannot resolve ${specifier}` })
      else queue.push(target)
    }
    const visit = (node: ts.Node): void => {
      if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier !== undefined && ts.isStringLiteral(node.moduleSpecifier)) {
        const typeOnly = ts.isImportDeclaration(node) ? node.importClause?.isTypeOnly === true : node.isTypeOnly
        if (!typeOnly) follow(node.moduleSpecifier.text)
        if (typeOnly) return
      } else if (ts.isCallExpression(node) && (node.expression.kind === ts.SyntaxKind.ImportKeyword || (ts.isIdentifier(node.expression) && node.expression.text === 'require'))) {
        const [arg] = node.arguments
        if (arg !== undefined && ts.isStringLiteralLike(arg)) follow(arg.text)
      } else if (ts.isImportTypeNode(node) || ts.isTypeQueryNode(node)) {
        return // types only
      } else if (own && ts.isIdentifier(node) && NODE_GLOBALS.has(node.text) && isGlobalUse(node)) {
        findings.push({ file: rel, what: `uses ${node.text} (line ${source.getLineAndCharacterOfPosition(node.getStart()).line + 1})` })
      }
      ts.forEachChild(node, visit)
    }
    visit(source)
  }
  return { files, findings }
}

/** A reference to the global (not a property name, a declaration, or a `typeof` guard). */
function isGlobalUse (node: ts.Identifier): boolean {
  const parent = node.parent
  if (ts.isPropertyAccessExpression(parent) && parent.name === node) return false
  if ((ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent) || ts.isPropertySignature(parent) || ts.isMethodDeclaration(parent)) && parent.name === node) return false
  if ((ts.isVariableDeclaration(parent) || ts.isParameter(parent) || ts.isFunctionDeclaration(parent) || ts.isBindingElement(parent)) && parent.name === node) return false
  if (ts.isTypeOfExpression(parent)) return false
  if (ts.isImportSpecifier(parent) || ts.isExportSpecifier(parent)) return false
  return true
}

function entries (mode: Mode): Array<[string, string]> {
  const out: Array<[string, string]> = []
  for (const subpath of ['.', './web']) {
    const target = pick(PKG.exports[subpath], WEB_CONDITIONS)
    if (target === undefined) continue
    const file = ownFile(target, mode)
    // `./web` comes with its own commit; until then only `.` is walked (reported, not hidden).
    if (subpath === './web' && !existsSync(file)) {
      t.comment(`${subpath}: ${path.relative(ROOT, file)} does not exist yet; not walked`)
      continue
    }
    out.push([subpath, file])
  }
  return out
}

t.test('#crypto: the Node port for Node, the WebCrypto port everywhere else', async (t) => {
  const map = PKG.imports['#crypto']
  const runtimes: Record<string, string[]> = {
    node: ['node', 'import', 'default'],
    'workerd (Cloudflare)': ['workerd', 'worker', 'browser', 'import', 'default'],
    'edge-light (Vercel, Next.js edge)': ['edge-light', 'worker', 'browser', 'import', 'default'],
    deno: ['deno', 'node', 'import', 'default'],
    bun: ['bun', 'node', 'import', 'default'],
    browser: ['browser', 'import', 'default'],
    'unknown runtime': ['import', 'default'],
  }
  for (const [runtime, conditions] of Object.entries(runtimes)) {
    t.equal(pick(map, conditions), runtime === 'node' ? './dist/crypto/node.js' : './dist/crypto/web.js', runtime)
  }
  t.equal(pick(map, ['mcwh-source', 'node', 'import']), './src/crypto/node.ts', 'the test runner and tsc: the Node source')
  t.equal(pick(map, ['mcwh-web-source', 'mcwh-source', 'node', 'import']), './src/crypto/web.ts', 'the web-port test run: the WebCrypto source')
})

t.test('#diagnostics: node:diagnostics_channel for Node, the silent port everywhere else', async (t) => {
  const map = PKG.imports['#diagnostics']
  const runtimes: Record<string, string[]> = {
    node: ['node', 'import', 'default'],
    'workerd (Cloudflare)': ['workerd', 'worker', 'browser', 'import', 'default'],
    'edge-light (Vercel, Next.js edge)': ['edge-light', 'worker', 'browser', 'import', 'default'],
    browser: ['browser', 'import', 'default'],
    'unknown runtime': ['import', 'default'],
  }
  for (const [runtime, conditions] of Object.entries(runtimes)) {
    t.equal(pick(map, conditions), runtime === 'node' ? './dist/diagnostics/node.js' : './dist/diagnostics/none.js', runtime)
  }
  t.equal(pick(map, ['mcwh-source', 'node', 'import']), './src/diagnostics/node.ts', 'the test runner and tsc: the Node source')
  t.equal(pick(map, ['mcwh-web-source', 'mcwh-source', 'node', 'import']), './src/diagnostics/none.ts', 'the web-port test run: the silent source')
})

t.test('the sources reachable from . and ./web use web-standard APIs only', async (t) => {
  const list = entries('source')
  t.ok(list.length >= 1, 'the main entry is walked')
  const { files, findings } = walk(list.map(([, f]) => f), 'source')
  t.ok([...files].some((f) => f.endsWith(path.join('src', 'crypto', 'web.ts'))), 'the WebCrypto port is reached through #crypto')
  t.notOk([...files].some((f) => f.endsWith(path.join('src', 'crypto', 'node.ts'))), 'the Node port is not')
  t.ok([...files].some((f) => f.endsWith(path.join('src', 'diagnostics', 'none.ts'))), 'the silent diagnostics port is reached through #diagnostics')
  t.notOk([...files].some((f) => f.endsWith(path.join('src', 'diagnostics', 'node.ts'))), 'node:diagnostics_channel is not')
  t.same(findings, [], `${files.size} modules walked from ${list.map(([s]) => s).join(' and ')}`)
})

const distBuilt = existsSync(path.join(ROOT, 'dist', 'crypto', 'web.js'))
t.test('the built package (dist) reachable from . and ./web uses web-standard APIs only', { skip: distBuilt ? false : 'dist/ is not built (or predates the crypto port): `npm test` builds it first' }, async (t) => {
  const list = entries('dist')
  const { files, findings } = walk(list.map(([, f]) => f), 'dist')
  t.same(findings, [], `${files.size} modules walked from ${list.map(([s]) => s).join(' and ')}`)
  // Their type declarations too: a Worker project type-checks without Node's type declarations.
  const declarations = [...files].filter((f) => f.startsWith(path.join(ROOT, 'dist'))).map((f) => f.replace(/\.js$/, '.d.ts')).filter((f) => existsSync(f))
  t.ok(declarations.length > 10, `${declarations.length} declaration files`)
  const nodeTypes = declarations.filter((f) => /from ['"]node:|import\(['"]node:|\bBuffer\b|NodeJS\./.test(readFileSync(f, 'utf8')))
  t.same(nodeTypes.map((f) => path.relative(ROOT, f)), [], 'no declaration file needs Node types')
})

t.test('the walker finds what it must refuse', async (t) => {
  // The checks themselves, on a scratch module: a walker that finds nothing proves nothing.
  const dir = path.join(ROOT, 'test', 'package', 'fixtures', 'module-graph')
  const { findings } = walk([path.join(dir, 'bad.ts')], 'source')
  const what = findings.map((f) => f.what.replace(/ \(line \d+\)/, '')).sort()
  t.same(what, ['imports node:crypto', 'imports stream', 'uses Buffer', 'uses __dirname', 'uses process', 'uses setImmediate'].sort())
})

// ---------------------------------------------------------------------------------------------
// The house's structure (docs/architecture.md): no import cycle in src, type-only imports
// included, and every import runs down the floors, never up and never sideways between two
// folders of one floor. The import graph is read by test/helpers/import-graph.ts.

/**
 * The floors, lowest first. A folder imports only from floors below its own (and from itself).
 * A top-level file of src is on the `(base)` floor unless it is an entry point listed in
 * `ENTRY_FILES`. A new folder must be placed here, and in the picture in docs/architecture.md.
 */
const FLOORS: ReadonlyArray<readonly string[]> = [
  ['(base)'], // errors.ts, logger.ts, base-url.ts...: import nothing of the package's folders
  ['crypto'],
  ['diagnostics'],
  ['events'],
  ['keys'],
  ['verify', 'replay'],
  ['dispatch'],
  ['client', 'receiver'],
  ['batches-route'],
  ['fastify', 'express', 'web', 'hono', 'nestjs', 'bullmq', 'postgres', 'sqlite'], // adapters, the queue hand-off, the PostgreSQL and SQLite stores: never each other
  ['testing'],
  ['cli'],
  ['(entries)'],
]
/** Top-level files that are entry points (the package's `.` and the bin), not base helpers. */
const ENTRY_FILES = new Set(['index.ts', 'cli.ts', 'webhooks.ts'])
/** The folder and floor of a file: its top-level folder's, or `(base)` / `(entries)` for a top-level file. */
function floorOf (rel: string): { folder: string, floor: number } {
  const slash = rel.indexOf('/')
  const folder = slash === -1 ? (ENTRY_FILES.has(rel) ? '(entries)' : '(base)') : rel.slice(0, slash)
  return { folder, floor: FLOORS.findIndex((f) => f.includes(folder)) }
}

/** Imports that run up the floors or sideways between two folders of one floor, and folders on no floor. */
function layerViolations (graph: ReadonlyMap<string, readonly string[]>): string[] {
  const out = new Set<string>()
  for (const [from, targets] of graph) {
    const a = floorOf(from)
    if (a.floor === -1) out.add(`src/${a.folder}/ is on no floor: add it to FLOORS (test/package/module-graph.test.ts) and to docs/architecture.md`)
    for (const to of targets) {
      const b = floorOf(to)
      if (a.folder === b.folder || b.floor === -1) continue
      if (b.floor > a.floor) out.add(`${from} -> ${to}: ${a.folder} imports ${b.folder}, a floor above it`)
      else if (b.floor === a.floor) out.add(`${from} -> ${to}: ${a.folder} imports ${b.folder}, a neighbour on its floor`)
    }
  }
  return [...out].sort()
}

t.test('src has no import cycle, type-only imports included', async (t) => {
  const graph = srcImportGraph(path.join(ROOT, 'src'))
  t.ok(graph.size > 80, `${graph.size} files read`)
  const missing = [...graph].flatMap(([from, targets]) => targets.filter((to) => !graph.has(to)).map((to) => `${from} -> ${to}`))
  t.same(missing, [], 'every import resolves to a file of src')
  t.same(importCycles(graph), [], 'no file reaches itself through its imports')
})

t.test('imports run down the floors: the core never imports the client, receivers, adapters, cli or testing', async (t) => {
  const graph = srcImportGraph(path.join(ROOT, 'src'))
  t.same(layerViolations(graph), [], 'no import runs up a floor or sideways')
  // The rules a reader looks for first, said outright (FLOORS implies them).
  const folderEdges = new Set([...graph].flatMap(([from, targets]) => targets.map((to) => `${floorOf(from).folder} -> ${floorOf(to).folder}`)))
  const upward: string[] = []
  for (const low of ['crypto', 'diagnostics', 'events', 'keys', 'verify', 'replay', 'dispatch', 'client']) {
    for (const high of ['receiver', 'batches-route', 'fastify', 'express', 'web', 'hono', 'nestjs', 'bullmq', 'testing', 'cli']) {
      if (folderEdges.has(`${low} -> ${high}`)) upward.push(`${low}/ imports ${high}/`)
    }
  }
  t.same(upward, [], 'core folders and the API client import no server side, adapter, cli or testing module')
  t.notOk(folderEdges.has('diagnostics -> keys'), 'keys/ imports diagnostics/, never the reverse')
  t.ok(folderEdges.has('keys -> diagnostics'), 'keys/ does publish its fetches through diagnostics/ (the check above is not vacuous)')
})

t.test('the structure checks find what they must refuse', async (t) => {
  // On a small made-up graph: checks that find nothing prove nothing.
  t.same(localImports('a/x.ts', [
    "import type { A } from './y.js'",
    "export type { B } from '../b/z.js'",
    "type C = import('../c.js').C",
    "const d = await import('#diagnostics')",
    "import 'fastify'",
  ].join('\n')), ['a/y.ts', 'b/z.ts', 'c.ts', 'diagnostics/node.ts', 'diagnostics/none.ts'], 'type-only imports, re-exports, import types and # imports are read; packages are not followed')
  const graph = new Map<string, string[]>([
    ['keys/a.ts', ['diagnostics/b.ts', 'errors.ts']],
    ['diagnostics/b.ts', ['keys/a.ts']],
    ['client/c.ts', ['receiver/d.ts', 'cli/e.ts']],
    ['receiver/d.ts', []],
    ['cli/e.ts', ['client/c.ts']],
    ['fastify/f.ts', ['web/g.ts']],
    ['web/g.ts', []],
    ['replay/s.ts', ['replay/s.ts']],
    ['errors.ts', []],
    ['somewhere/h.ts', []],
  ])
  t.same(importCycles(graph), [
    'cli/e.ts -> client/c.ts -> cli/e.ts',
    'diagnostics/b.ts -> keys/a.ts -> diagnostics/b.ts',
    'replay/s.ts -> replay/s.ts',
  ], 'loops across files and a file importing itself')
  t.same(layerViolations(graph), [
    'client/c.ts -> cli/e.ts: client imports cli, a floor above it',
    'client/c.ts -> receiver/d.ts: client imports receiver, a neighbour on its floor',
    'diagnostics/b.ts -> keys/a.ts: diagnostics imports keys, a floor above it',
    'fastify/f.ts -> web/g.ts: fastify imports web, a neighbour on its floor',
    'src/somewhere/ is on no floor: add it to FLOORS (test/package/module-graph.test.ts) and to docs/architecture.md',
  ])
})
