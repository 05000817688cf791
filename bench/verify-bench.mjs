// The in-process verify bench: the library's verifyWebhook, called as a user calls it, against
// the hand-written ideal receiver (with and without JSON.parse) and the installed peers, on the
// same signed deliveries, in one process, round-robin. Started by bench/run.mjs.
import { verifyWebhook } from '../dist/index.js'
import { machine } from './lib/env.mjs'
import { CUSTOMER_HANDLE, contentDigest, corruptSignature, makeBody, makeKeyPair, signedHeaders, tamper } from './lib/fixtures.mjs'
import { createIdealVerifier } from './lib/ideal.mjs'
import { fmtBytes, fmtOps, fmtRatio, fmtUs, mdTable, ratio, runSuite, stats } from './lib/measure.mjs'
import { loadPeers } from './peers.mjs'

const IDEAL = 'ideal receiver'
const IDEAL_PARSE = 'ideal receiver + JSON.parse'
const LIBRARY = 'mailchannels-webhooks verifyWebhook'
// The project's targets: the library within 5 % of the ideal + JSON.parse, and at least 3× the
// speed of mailchannels-sdk for deliveries of up to 100 events.
const MAX_VS_IDEAL = 1.05
const MIN_VS_SDK = 3
const SMALL = 100

const log = (s) => process.stderr.write(s + '\n')

async function accepts (promise) {
  try { return Boolean(await promise) } catch { return false }
}

/**
 * Prints a table per body size and a summary; returns every sample.
 * @param {{ events: number[], reps: number, timeMs: number, warmupMs: number }} s
 */
export async function runVerifyBench (s) {
  const keys = makeKeyPair()
  const ideal = createIdealVerifier({ k1: keys.spkiB64 })
  const customerHandles = [CUSTOMER_HANDLE]
  const { peers, missing } = await loadPeers(keys.spkiB64)
  const impls = [
    { name: IDEAL, parses: false, payloadType: 'buffer', verify: async (payload, headers) => ideal.verify(payload, headers) },
    { name: IDEAL_PARSE, parses: true, payloadType: 'buffer', verify: async (payload, headers) => ideal.verifyAndParse(payload, headers) },
    {
      name: LIBRARY,
      parses: true,
      payloadType: 'buffer',
      // The public static API: options resolved on every call, typed events returned.
      verify: async (payload, headers, publicKey) => (await verifyWebhook({ payload, headers, publicKey, customerHandles })).data !== null,
    },
    ...peers.map((p) => ({ ...p, parses: false })),
  ]
  const settings = `in process, one call at a time, ${s.reps} rep${s.reps === 1 ? '' : 's'} × ${s.timeMs} ms, ${s.warmupMs} ms warm-up, headers re-signed before every sample; ${machine()}`

  console.log('## Verify bench')
  for (const line of missing) console.log(`\n${line}`)
  const results = { settings: { ...s }, machine: machine(), byEvents: {} }
  const summary = []

  for (const n of s.events) {
    const body = makeBody(n)
    const digest = contentDigest(body)
    const cases = []
    const failed = []
    for (const impl of impls) {
      const headers = signedHeaders(digest, keys.privateKey)
      const payload = impl.payloadType === 'string' ? body.toString('utf8') : body
      const badPayload = impl.payloadType === 'string' ? tamper(body).toString('utf8') : tamper(body)
      // Only an implementation that accepts a valid delivery and rejects a tampered body and a
      // corrupted signature is timed: one that skips a check must not look fast.
      const valid = await accepts(impl.verify(payload, { ...headers }, keys.spkiB64))
      const tampered = !(await accepts(impl.verify(badPayload, { ...headers }, keys.spkiB64)))
      const badSig = !(await accepts(impl.verify(payload, corruptSignature(headers), keys.spkiB64)))
      if (!valid || !tampered || !badSig) {
        failed.push(`${impl.name} failed the correctness checks (valid accepted: ${valid}, tampered body rejected: ${tampered}, corrupted signature rejected: ${badSig}); not timed.`)
        continue
      }
      cases.push({
        name: impl.name,
        impl,
        // A fresh `created` for every sample keeps long runs inside the 300 s freshness window.
        before: () => Object.assign(headers, signedHeaders(digest, keys.privateKey)),
        fn: () => impl.verify(payload, headers, keys.spkiB64),
      })
    }
    log(`verify bench: ${n} event(s), ${body.length} B, ${cases.length} implementations`)
    const samples = await runSuite(cases, { reps: s.reps, timeMs: s.timeMs, warmupMs: s.warmupMs, log })

    const rows = []
    const byName = {}
    for (const c of cases) {
      const st = stats(samples.get(c.name))
      const base = samples.get(c.impl.parses ? IDEAL_PARSE : IDEAL)
      const vsIdeal = base ? ratio(base, samples.get(c.name)) : null // time ratio: ideal ops / impl ops
      byName[c.name] = { ...st, parses: c.impl.parses, timeVsIdeal: vsIdeal }
      rows.push([c.name, fmtOps(st.median), fmtUs(st.median), `${fmtOps(st.min)}–${fmtOps(st.max)} (${st.spreadPct.toFixed(0)}%)`,
        c.impl.parses ? 'yes' : 'no', fmtRatio(vsIdeal)])
    }
    results.byEvents[n] = { bytes: body.length, implementations: byName }
    console.log(`\n### Verify, ${n.toLocaleString('en')} event${n === 1 ? '' : 's'} (${fmtBytes(body.length)} body)\n\nSettings: ${settings}.\n`)
    console.log(mdTable(['implementation', 'calls/s (median)', 'per call', `range over ${s.reps} rep${s.reps === 1 ? '' : 's'} (spread)`, 'parses the events', 'time vs the ideal in the same scope'], rows))
    for (const line of failed) console.log(`\n${line}`)
    summary.push({ n, bytes: body.length, samples })
  }

  printSummary(summary, peers, settings)
  return results
}

function printSummary (summary, peers, settings) {
  const sdk = peers.find((p) => p.name.startsWith('mailchannels-sdk'))?.name
  const hms = peers.find((p) => p.name.startsWith('http-message-signatures'))?.name
  const rows = []
  let allMet = true
  for (const { n, bytes, samples } of summary) {
    const lib = samples.get(LIBRARY)
    const idealParse = samples.get(IDEAL_PARSE)
    const idealPlain = samples.get(IDEAL)
    const sdkOps = sdk && samples.get(sdk)
    const hmsOps = hms && samples.get(hms)
    const cells = [`${n.toLocaleString('en')} (${fmtBytes(bytes)})`, idealParse ? fmtUs(stats(idealParse).median) : '—']
    if (lib === undefined || idealParse === undefined) {
      cells.push('not timed (see above)', '—')
      allMet = false
    } else {
      const vsIdeal = ratio(idealParse, lib)
      const met = vsIdeal.median <= MAX_VS_IDEAL
      allMet &&= met
      cells.push(fmtUs(stats(lib).median), `${fmtRatio(vsIdeal)} ${met ? 'ok' : 'MISS'}`)
    }
    if (sdk) {
      cells.push(sdkOps && idealPlain ? fmtRatio(ratio(idealPlain, sdkOps)) : 'not timed')
      const speedUp = sdkOps && lib ? ratio(lib, sdkOps) : null
      const ceiling = sdkOps && idealParse ? ratio(idealParse, sdkOps) : null
      let mark = ''
      if (n <= SMALL) {
        const met = speedUp !== null && speedUp.median >= MIN_VS_SDK
        allMet &&= met
        mark = met ? ' ok' : ' MISS'
      }
      cells.push(`${fmtRatio(speedUp, 1)}${mark}${ceiling ? ` [ideal + JSON.parse: ${ceiling.median.toFixed(1)}×]` : ''}`)
    }
    if (hms) cells.push(hmsOps && idealPlain ? fmtRatio(ratio(idealPlain, hmsOps)) : 'not timed')
    rows.push(cells)
  }
  const header = ['events (body)', 'ideal + JSON.parse, per call', 'library, per call', `library time ÷ ideal + JSON.parse (target ≤ ${MAX_VS_IDEAL}×)`]
  if (sdk) header.push('mailchannels-sdk time ÷ ideal', `library speed-up over mailchannels-sdk (target ≥ ${MIN_VS_SDK}× up to ${SMALL} events)`)
  if (hms) header.push('http-message-signatures time ÷ ideal')
  console.log(`\n### Verify summary (medians of per-rep ratios, min–max in brackets)\n\nSettings: ${settings}.\n`)
  console.log(mdTable(header, rows))
  console.log(`\n${allMet ? 'All targets met in this run.' : 'Some targets missed in this run (MISS).'} Compare ratios from the same run, not absolute times across runs.`)
}
