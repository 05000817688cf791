// `npm run bench` (= `npm run build && node bench/run.mjs`): the library's verify against the
// hand-written ideal and the mailchannels-sdk peer, side by side, with the issue-2 targets.
// Optional: --http (HTTP harness with bench/http-adapter.mjs), --replay (bench/replay-bench.mjs).
// See bench/README.md. Run from the repository root; the harness lives in ../shared/bench
// (override with BENCH_HARNESS=<dir>).
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const harness = path.resolve(root, process.env.BENCH_HARNESS ?? '../shared/bench')

const { values: args } = parseArgs({
  options: {
    events: { type: 'string', default: '1,100,10000' },
    reps: { type: 'string', default: '5' },
    time: { type: 'string', default: '300' },
    warmup: { type: 'string', default: '200' },
    json: { type: 'string' },
    'no-verify': { type: 'boolean', default: false },
    http: { type: 'boolean', default: false },
    'http-args': { type: 'string', default: '--pin' },
    replay: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
})

if (args.help) {
  console.log(`npm run bench [-- options]
  --events 1,100,10000   bodies of ~251 B per event
  --reps 5 --time 300    round-robin repetitions, ms per sample (quote medians with ranges)
  --warmup 200           ms per case before timing
  --json out.json        save the verify harness's raw results
  --no-verify            skip the in-process verify bench
  --http                 also run ../shared/bench/http-bench.mjs --plugin ./bench/http-adapter.mjs
  --http-args="--pin"    extra arguments for the HTTP bench (use =, e.g. --http-args="--pin --events 4")
  --replay               also run bench/replay-bench.mjs`)
  process.exit(0)
}

const LIB = 'mailchannels-webhooks Webhooks.verify'
const SDK = 'mailchannels-sdk Webhooks.verify'
const IDEAL = 'ideal (node:crypto, cached KeyObject)'
const IDEAL_PARSE = 'ideal + JSON.parse'
// Issue 2: at most 1.05x the baseline's time; at least 3x faster than the SDK for small deliveries.
const MAX_VS_IDEAL = 1.05
const MIN_VS_SDK = 3
const SMALL = 100 // events: "small deliveries" (25 KB) and below

function run (cmd, argv, opts = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, argv, { cwd: root, stdio: 'inherit', ...opts })
    const stop = () => child.kill('SIGINT')
    process.once('SIGINT', stop)
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      process.off('SIGINT', stop)
      if (code === 0) resolve()
      else reject(new Error(`${path.basename(argv[0] ?? cmd)} exited with ${signal ?? code}`))
    })
  })
}

function median (xs) {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}

/** Median (min-max) of per-rep ratios a[i] / b[i]: both measured in the same round. */
function perRep (a, b) {
  const rs = a.map((x, i) => x / b[i]).filter(Number.isFinite)
  return { median: median(rs), min: Math.min(...rs), max: Math.max(...rs) }
}
const fmt = (r, digits = 2) => `${r.median.toFixed(digits)}× (${r.min.toFixed(digits)}–${r.max.toFixed(digits)})`
const us = (ops) => { const t = 1e6 / ops; return t >= 1000 ? `${(t / 1000).toFixed(2)} ms` : `${t.toFixed(1)} µs` }

async function verifyBench () {
  const out = args.json ? path.resolve(args.json) : path.join(os.tmpdir(), `mc-verify-bench-${process.pid}.json`)
  await run(process.execPath, [
    path.join(harness, 'verify-bench.mjs'),
    '--impl', './bench/verify-adapter.mjs',
    '--impl', path.join(harness, 'adapters', 'mailchannels-sdk.mjs'),
    '--events', args.events, '--reps', args.reps, '--time', args.time, '--warmup', args.warmup,
    '--json', out,
  ])
  const { results } = JSON.parse(fs.readFileSync(out, 'utf8'))
  if (!args.json) fs.rmSync(out, { force: true })

  const rows = []
  let pass = true
  for (const [n, cases] of Object.entries(results.compare)) {
    const lib = cases[LIB]
    const sdk = cases[SDK]
    const ideal = cases[IDEAL]
    const idealParse = cases[IDEAL_PARSE]
    if (lib === undefined) {
      rows.push(`| ${n} | not timed (failed the harness's correctness checks) | | | | |`)
      pass = false
      continue
    }
    const vsIdeal = perRep(idealParse.samples, lib.samples) // time ratio: ideal ops / lib ops
    const vsSdk = sdk ? perRep(lib.samples, sdk.samples) : null // speed-up: lib ops / sdk ops
    const sdkVsIdeal = sdk ? perRep(ideal.samples, sdk.samples) : null
    const ceiling = sdk ? perRep(idealParse.samples, sdk.samples) : null // what the ideal + JSON.parse itself reaches vs the SDK
    const okIdeal = vsIdeal.median <= MAX_VS_IDEAL
    const okSdk = Number(n) > SMALL || (vsSdk !== null && vsSdk.median >= MIN_VS_SDK)
    pass &&= okIdeal && okSdk
    rows.push(`| ${n} | ${us(idealParse.median)} | ${us(lib.median)} | ${fmt(vsIdeal)} ${okIdeal ? 'ok' : 'MISS'} | ${sdk ? us(sdk.median) : '—'} (${sdkVsIdeal ? fmt(sdkVsIdeal) : '—'} vs ideal) | ${vsSdk ? fmt(vsSdk, 1) : '—'}${Number(n) <= SMALL ? (okSdk ? ' ok' : ' MISS') : ''}${ceiling ? ` [ideal + JSON.parse: ${ceiling.median.toFixed(1)}×]` : ''} |`)
  }
  console.log(`\n### Summary: library vs baseline and vs mailchannels-sdk (${args.reps} reps × ${args.time} ms, medians of per-rep ratios with min–max)\n`)
  console.log('| events | ideal + JSON.parse | library verify | library time vs ideal + JSON.parse (target ≤ 1.05×) | mailchannels-sdk (no parse) | library speed-up vs SDK (target ≥ 3× for ≤ 100 events) |')
  console.log('|---|---|---|---|---|---|')
  for (const r of rows) console.log(r)
  console.log(`\n${pass ? 'All targets met in this run.' : 'Some targets missed in this run (see MISS).'} Ratios come from the same rounds; absolute times drift with the machine.`)
}

try {
  if (!args['no-verify']) await verifyBench()
  if (args.http) {
    const adapter = path.join(root, 'bench', 'http-adapter.mjs')
    if (fs.existsSync(adapter)) {
      console.log('\n## HTTP bench (ratios vs fastify-ideal)\n')
      await run(process.execPath, [path.join(harness, 'http-bench.mjs'), '--plugin', './bench/http-adapter.mjs', ...args['http-args'].split(/\s+/).filter(Boolean)])
    } else console.log('\n(--http: bench/http-adapter.mjs does not exist yet; skipped)')
  }
  if (args.replay) {
    const replay = path.join(root, 'bench', 'replay-bench.mjs')
    if (fs.existsSync(replay)) {
      console.log('\n## Replay bench\n')
      await run(process.execPath, ['--expose-gc', replay])
    } else console.log('\n(--replay: bench/replay-bench.mjs does not exist yet; skipped)')
  }
} catch (err) {
  console.error(err.message)
  process.exitCode = 1
}
