// The receiver core has no import cycle, type-only imports included (a cycle made
// src/receiver/dispatch.ts -> receiver.ts -> options.ts -> dispatch.ts before the answer step became
// ./answer.ts with its options in ./options.ts), and no webhook adapter imports another (the
// fetch I/O both fetch adapters share is in src/receiver/web/). Imports are read with
// `ts.preProcessFile`, which sees `import type`, `export ... from` and `import('...')` alike.
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { importCycles, localImports, srcImportGraph } from '../helpers/import-graph.js'

const SRC = fileURLToPath(new URL('../../src/', import.meta.url))
const importsOf = localImports
const srcGraph = (): Map<string, string[]> => srcImportGraph(SRC)

t.test('the cycle finder finds a cycle made of type-only imports', async (t) => {
  // The check itself, on a scratch graph: a finder that finds nothing proves nothing.
  const graph = new Map([
    ['receiver/a.ts', importsOf('receiver/a.ts', "import type { B } from './b.js'\nexport const a = 1")],
    ['receiver/b.ts', importsOf('receiver/b.ts', "export type { A } from './c.js'")],
    ['receiver/c.ts', importsOf('receiver/c.ts', "let x: import('./a.js').A")],
    ['receiver/d.ts', importsOf('receiver/d.ts', "import { a } from './a.js'")],
  ])
  t.equal(importCycles(graph).length, 1, 'one cycle')
  t.match(importCycles(graph)[0], /receiver\/a\.ts.*receiver\/b\.ts.*receiver\/c\.ts/)
})

t.test('no import cycle passes through src/receiver (type-only imports included)', async (t) => {
  const graph = srcGraph()
  t.ok(graph.has('receiver/pipeline.ts') && graph.has('receiver/answer.ts'), 'the receiver files are read')
  const throughReceiver = importCycles(graph).filter((c) => c.includes('receiver/'))
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
