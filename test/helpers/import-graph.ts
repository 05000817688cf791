// The import graph of the package's sources, for the structure tests: each file's imports read
// with `ts.preProcessFile`, which sees `import type`, `export ... from`, `import('...')` in types
// and dynamic imports alike, and the import cycles in it.
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import ts from 'typescript'

/** What `#crypto` and `#diagnostics` may resolve to: an import of either reaches both ports. */
const HASH_IMPORTS: Readonly<Record<string, readonly string[]>> = {
  '#crypto': ['crypto/node.ts', 'crypto/web.ts'],
  '#diagnostics': ['diagnostics/node.ts', 'diagnostics/none.ts'],
}

/** The package files that `text` (the file `rel`, relative to src) imports, relative to src. */
export function localImports (rel: string, text: string): string[] {
  const out = new Set<string>()
  for (const { fileName } of ts.preProcessFile(text, true, true).importedFiles) {
    if (fileName.startsWith('.')) {
      out.add(path.posix.normalize(path.posix.join(path.posix.dirname(rel), fileName.replace(/\.js$/, '.ts'))))
    } else if (fileName.startsWith('#')) {
      for (const target of HASH_IMPORTS[fileName] ?? [`unknown ${fileName}`]) out.add(target)
    }
  }
  return [...out]
}

/** Every .ts file under `src` with the package files it imports (paths relative to src, `/`-separated). */
export function srcImportGraph (src: string): Map<string, string[]> {
  const graph = new Map<string, string[]>()
  const visit = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name)
      if (entry.isDirectory()) {
        visit(file)
      } else if (entry.name.endsWith('.ts')) {
        const rel = path.relative(src, file).split(path.sep).join('/')
        graph.set(rel, localImports(rel, readFileSync(file, 'utf8')))
      }
    }
  }
  visit(src)
  return graph
}

/** Each import cycle once, as a path `a -> b -> ... -> a` (Tarjan's strongly connected components, then a shortest loop in each). */
export function importCycles (graph: ReadonlyMap<string, readonly string[]>): string[] {
  let counter = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const components: string[][] = []
  const connect = (v: string): void => {
    index.set(v, counter)
    low.set(v, counter)
    counter++
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
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) components.push(component)
    }
  }
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) connect(v)
  return components.map((component) => {
    const members = new Set(component)
    const start = [...members].sort()[0]!
    const previous = new Map<string, string>()
    const queue = [start]
    for (let i = 0; i < queue.length; i++) {
      const v = queue[i]!
      for (const w of graph.get(v) ?? []) {
        if (w === start) {
          const loop = [start]
          for (let u = v; u !== start; u = previous.get(u)!) loop.splice(1, 0, u)
          return [...loop, start].join(' -> ')
        }
        if (members.has(w) && !previous.has(w)) {
          previous.set(w, v)
          queue.push(w)
        }
      }
    }
    return component.join(' <-> ') // unreachable: every component holds a loop through its first file
  }).sort()
}
