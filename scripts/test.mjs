// `npm test` after `pretest` has built dist/: the project type-check (`tsc -p tsconfig.json`, test
// files, examples and benches included) runs beside the tap suite instead of before it. It needs
// dist/'s declarations (tests and examples import the package by name), so it cannot overlap the
// build, but nothing in the suite waits for it, and most test files wait on I/O. tap's output
// streams as usual; the type-check's is printed after the suite, and only when it fails, so on
// success tap's summary stays the last line. Arguments are passed to tap (`npm test -- test/verify/*.test.ts`).
// The exit code is tap's when the suite fails, else the type-check's.
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)))
const require = createRequire(path.join(root, 'package.json'))
const tscBin = require.resolve('typescript/bin/tsc')
const tapBin = path.join(path.dirname(require.resolve('tap/package.json')), require('tap/package.json').bin.tap)

const exited = (child) => new Promise((resolve) => {
  child.once('error', (err) => { process.stderr.write(`${err.message}\n`); resolve(1) })
  child.once('exit', (code, signal) => { resolve(code ?? (signal === null ? 1 : 128)) })
})

const typecheck = spawn(process.execPath, [tscBin, '-p', 'tsconfig.json'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] })
let typecheckOutput = ''
typecheck.stdout.setEncoding('utf8').on('data', (chunk) => { typecheckOutput += chunk })
typecheck.stderr.setEncoding('utf8').on('data', (chunk) => { typecheckOutput += chunk })
const typechecked = exited(typecheck)

// tap builds its Test class with the plugins of .taprc when they differ from the ones it was built
// with, but a run that rebuilds still starts its test files with the loaders of the old set: on a
// fresh `npm ci`, the default set, whose TypeScript plugin (ts-node) resolves some packages' ESM
// imports wrongly (`@nestjs/common/pipes/validation.pipe.js.js`). So the first run of a fresh
// install builds first (a few seconds), and every run starts with the configured plugins.
async function builtAsConfigured () {
  try {
    const { TapConfig } = await import(pathToFileURL(require.resolve('@tapjs/config')).href)
    const { signature } = await import(pathToFileURL(require.resolve('@tapjs/test')).href)
    return signature === (await TapConfig.load()).pluginSignature
  } catch {
    return false
  }
}
if (!await builtAsConfigured()) {
  const built = await exited(spawn(process.execPath, [tapBin, 'build'], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] }))
  if (built !== 0) process.stderr.write(`tap build exited with ${built}; running the suite anyway\n`)
}

const tap = spawn(process.execPath, [tapBin, ...process.argv.slice(2)], { cwd: root, stdio: 'inherit' })
const tested = exited(tap)

// Ctrl-C reaches both children through the terminal's process group; a plain kill of this
// process (a CI timeout) is passed on so neither outlives it.
for (const signal of ['SIGTERM', 'SIGHUP']) {
  process.once(signal, () => {
    typecheck.kill(signal)
    tap.kill(signal)
  })
}
process.on('SIGINT', () => {})

const [tapCode, typecheckCode] = await Promise.all([tested, typechecked])
if (typecheckCode !== 0) {
  process.stdout.write(`\n# type-check failed (tsc -p tsconfig.json, exit ${typecheckCode}):\n${typecheckOutput.trimEnd()}\n`)
}
process.exitCode = tapCode !== 0 ? tapCode : typecheckCode
