// The receiver core has no import cycle, type-only imports included (a cycle made
// src/receiver/dispatch.ts -> receiver.ts -> options.ts -> dispatch.ts before the answer step became
// ./answer.ts with its options in ./options.ts), and no webhook adapter imports another (the
// fetch I/O both fetch adapters share is in src/receiver/web/). Imports are read with
// `ts.preProcessFile`, which sees `import type`, `export ... from` and `import('...')` alike.
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import ts from 'typescript'

const SRC = fileURLToPath(new URL('../../src/', import.meta.url))
/** What `#crypto` and `#diagnostics` may resolve to: an import of either reaches both ports. */
const HASH_IMPORTS: Readonly<Record<string, readonly string[]>> = {
  '#crypto': ['crypto/node.ts', 'crypto/web.ts'],
  '#diagnostics': ['diagnostics/node.ts', 'diagnostics/none.ts'],
}

/** The package files `text` (the file `rel`, relative to src) imports, relative to src. */
function importsOf (rel: string, text: string): string[] {
  const out = new Set<string>()
  for (const { fileName } of ts.preProcessFile(text, true, true).importedFiles) {
    if (fileName.startsWith('.')) out.add(path.posix.normalize(path.posix.join(path.posix.dirname(rel), fileName.replace(/\.js$/, '.ts'))))
    else if (fileName.startsWith('#')) for (const target of HASH_IMPORTS[fileName] ?? []) out.add(target)
  }
  return [...out]
}

function srcGraph (): Map<string, string[]> {
  const graph = new Map<string, string[]>()
  const visit = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name)
      if (entry.isDirectory()) visit(file)
      else if (entry.name.endsWith('.ts')) {
        const rel = path.relative(SRC, file).split(path.sep).join('/')
        graph.set(rel, importsOf(rel, readFileSync(file, 'utf8')))
      }
    }
  }
  visit(SRC)
  return graph
}

/** The cycles of a graph: its strongly connected components of more than one file, or a file importing itself (Tarjan). */
function cycles (graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const found: string[][] = []
  let next = 0
  const connect = (v: string): void => {
    index.set(v, next)
    low.set(v, next++)
    stack.push(v)
    onStack.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue
      if (!index.has(w)) {
        connect(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!))
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = []
      let w: string
      do {
        w = stack.pop()!
        onStack.delete(w)
        component.push(w)
      } while (w !== v)
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.sort())
    }
  }
  for (const v of graph.keys()) if (!index.has(v)) connect(v)
  return found
}

t.test('the cycle finder finds a cycle made of type-only imports', async (t) => {
  // The check itself, on a scratch graph: a finder that finds nothing proves nothing.
  const graph = new Map([
    ['receiver/a.ts', importsOf('receiver/a.ts', "import type { B } from './b.js'\nexport const a = 1")],
    ['receiver/b.ts', importsOf('receiver/b.ts', "export type { A } from './c.js'")],
    ['receiver/c.ts', importsOf('receiver/c.ts', "let x: import('./a.js').A")],
    ['receiver/d.ts', importsOf('receiver/d.ts', "import { a } from './a.js'")],
  ])
  t.same(cycles(graph), [['receiver/a.ts', 'receiver/b.ts', 'receiver/c.ts']])
})

t.test('no import cycle passes through src/receiver (type-only imports included)', async (t) => {
  const graph = srcGraph()
  t.ok(graph.has('receiver/flow.ts') && graph.has('receiver/answer.ts'), 'the receiver files are read')
  const throughReceiver = cycles(graph).filter((c) => c.some((f) => f.startsWith('receiver/')))
  t.same(throughReceiver, [])
})

t.test('no webhook adapter imports another, and the receiver imports none of them', async (t) => {
  const ADAPTERS = ['express', 'fastify', 'web', 'hono']
  const folder = (f: string): string => f.split('/')[0]!
  const wrong: string[] = []
  for (const [file, imports] of srcGraph()) {
    const from = folder(file)
    if (from !== 'receiver' && !ADAPTERS.includes(from)) continue
    for (const target of imports) {
      const to = folder(target)
      if (ADAPTERS.includes(to) && to !== from) wrong.push(`${file} -> ${target}`)
    }
  }
  t.same(wrong, [])
})
