// `npm run bench` (= `npm run build && node bench/run.mjs`): the library's verify against a
// hand-written ideal receiver and the installed peers, side by side in one run; with --http the
// Fastify plugin (also answering with handlers: a WebhookEventRouter, with and without a subscriber
// on the delivery diagnostics channel), the web handler (on @hono/node-server) and the Express middleware against
// ideal Fastify / Express receivers under load; with --replay the replay stores. `--help` lists the options; bench/README.md says how
// to read the tables.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { HELP, parseBenchArgs } from './options.mjs'

const here = path.dirname(fileURLToPath(import.meta.url))
const root = path.resolve(here, '..')
const argv = process.argv.slice(2)

let opts
try {
  opts = parseBenchArgs(argv)
} catch (err) {
  console.error(`bench: ${err.message}`)
  process.exit(2)
}
if (opts.help) {
  console.log(HELP)
  process.exit(0)
}
if (!opts.verify && !opts.http && !opts.replay) {
  console.error('bench: nothing to run (--no-verify without --http or --replay). See --help.')
  process.exit(2)
}
if (!fs.existsSync(path.join(root, 'dist', 'index.js'))) {
  console.error('bench: dist/ is missing. Build the library first: npm run build (npm run bench does it for you).')
  process.exit(1)
}

/** Runs a Node script of this folder as a child process; resolves when it exits with 0. */
function runScript (script, args, env = {}, nodeFlags = []) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeFlags, path.join(here, script), ...args], { cwd: root, stdio: 'inherit', env: { ...process.env, ...env } })
    // Ctrl-C reaches the child too (same process group); wait for it to clean up and exit.
    const ignore = () => {}
    process.on('SIGINT', ignore)
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      process.off('SIGINT', ignore)
      if (code === 0) resolve()
      else if (code === 130 || signal === 'SIGINT') reject(new Error('interrupted'))
      else reject(new Error(`${script} ended with ${signal ?? `exit code ${code}`}`))
    })
  })
}

const results = {}
try {
  if (opts.verify) {
    const { runVerifyBench } = await import('./verify-bench.mjs')
    results.verify = await runVerifyBench(opts.verifyBench)
  }
  if (opts.http) {
    console.log('')
    const file = opts.json ? path.join(os.tmpdir(), `mailchannels-webhooks-http-bench-${process.pid}.json`) : undefined
    await runScript('http-bench.mjs', argv, file ? { BENCH_RESULTS_FILE: file } : {})
    if (file) {
      results.http = JSON.parse(fs.readFileSync(file, 'utf8'))
      fs.rmSync(file, { force: true })
    }
  }
  if (opts.replay) {
    console.log('\n## Replay-store bench\n')
    await runScript('replay-bench.mjs', [], {}, ['--expose-gc'])
  }
  if (opts.json) {
    fs.writeFileSync(path.resolve(opts.json), JSON.stringify(results, null, 2))
    console.log(`\nEvery sample: ${opts.json}`)
  }
} catch (err) {
  console.error(`bench: ${err.message}`)
  process.exitCode = 1
}
