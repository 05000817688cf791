// A small timing engine (process.hrtime.bigint) and the statistics the tables print.
// Cases are timed round-robin: every repetition visits every case, starting from a different
// one each time, so slow drifts of a shared machine hit all cases alike. Ratios are taken per
// repetition (two cases measured seconds apart) and then summarised by their median.

const now = () => process.hrtime.bigint()

/** Calls `fn` (awaited, one at a time) for about `timeMs`; returns calls per second. */
async function opsPerSecond (fn, timeMs) {
  const limit = BigInt(Math.round(timeMs * 1e6))
  const t0 = now()
  let ops = 0
  let t
  do {
    await fn()
    ops++
    t = now()
  } while (t - t0 < limit)
  return ops / (Number(t - t0) / 1e9)
}

/**
 * @param {Array<{name: string, fn: () => unknown, before?: () => void}>} cases
 *   `before` runs ahead of every sample of its case, outside the timed region.
 * @returns {Promise<Map<string, number[]>>} ops/s per repetition, by case name
 */
export async function runSuite (cases, { reps, timeMs, warmupMs, log = () => {} }) {
  const samples = new Map(cases.map((c) => [c.name, []]))
  for (const c of cases) { // JIT, key caches, lazy initialisation
    c.before?.()
    await opsPerSecond(c.fn, warmupMs)
  }
  for (let r = 0; r < reps; r++) {
    const k = r % cases.length
    for (const c of [...cases.slice(k), ...cases.slice(0, k)]) {
      c.before?.()
      samples.get(c.name).push(await opsPerSecond(c.fn, timeMs))
    }
    log(`  rep ${r + 1}/${reps} done`)
  }
  return samples
}

export function median (xs) {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}

/** Median, min, max and spread ((max - min) / median, in %) of a list of samples. */
export function stats (xs) {
  const med = median(xs)
  const min = Math.min(...xs)
  const max = Math.max(...xs)
  return { median: med, min, max, spreadPct: med ? ((max - min) / med) * 100 : 0, samples: xs }
}

/** Per-repetition ratios a[i] / b[i], summarised. */
export function ratio (a, b) {
  const rs = []
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (b[i] > 0) rs.push(a[i] / b[i])
  return rs.length ? stats(rs) : null
}

/** "1.05× (0.98–1.12)": a ratio's median with its range. */
export function fmtRatio (r, digits = 2) {
  return r === null ? '—' : `${r.median.toFixed(digits)}× (${r.min.toFixed(digits)}–${r.max.toFixed(digits)})`
}

export function fmtOps (x) {
  if (!Number.isFinite(x)) return '—'
  if (x >= 1e6) return (x / 1e6).toFixed(2) + 'M'
  if (x >= 1e4) return (x / 1e3).toFixed(1) + 'k'
  if (x >= 100) return x.toFixed(0)
  return x.toFixed(2)
}

/** Time per call for a rate in calls per second. */
export function fmtUs (ops) {
  const us = 1e6 / ops
  if (!Number.isFinite(us)) return '—'
  if (us >= 1000) return (us / 1000).toFixed(2) + ' ms'
  if (us >= 10) return us.toFixed(1) + ' µs'
  return us.toFixed(2) + ' µs'
}

export function fmtBytes (n) {
  if (n >= 1048576) return `${(n / 1048576).toFixed(1)} MiB`
  if (n >= 1024) return `${(n / 1024).toFixed(1)} KiB`
  return `${n.toLocaleString('en')} B`
}

/** A GitHub-markdown table. */
export function mdTable (header, rows) {
  return [
    `| ${header.join(' | ')} |`,
    `|${header.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n')
}
