// reconcile: resend every failed batch of a window once.
import type { ReconcileBatchResult, ReconcileOptions, ReconcileReport, ReconcileSettled, ReconcileSkipReason } from '../client/reconcile.js'
import { checkReconcileOptions } from '../client/reconcile.js'
import { terminalText } from '../terminal-text.js'
import { BIN, numeric, UsageError } from './args.js'
import { BOLD, DIM, GREEN, plural, RED, YELLOW } from './io.js'
import { answered, batchTable, windowOptions } from './batch-commands.js'
import { connect, fail, printJson, type Context } from './operator-connection.js'
import { readReconcileState, StateFileError, writeReconcileState } from './reconcile-state.js'

/** Why a listed batch was not resent because it does not match what was asked for; `null` for the other reasons. */
function mismatchText (r: ReconcileBatchResult): string | null {
  if (r.outcome !== 'skipped') return null
  const reason: ReconcileSkipReason = r.reason
  if (reason === 'status_not_requested') return `listed as ${terminalText(r.batch.status)}, a status not asked for`
  if (reason === 'outside_window') return `created at ${terminalText(r.batch.createdAt)}, outside the window`
  if (reason === 'other_webhook') return `sent to ${terminalText(r.batch.webhook)}, not the --webhook asked for`
  return null
}

const isMismatch = (r: ReconcileBatchResult): boolean => mismatchText(r) !== null

/** A progress display: a bar rewritten in place on a terminal, one plain line per batch otherwise. */
function progressView (c: Context, stateFile: string | undefined): { update (r: ReconcileSettled, done: number, total: number, counts: Record<string, number>): void, end (): void } {
  const tty = c.io.tty === true && typeof c.io.write === 'function'
  const describe = (r: ReconcileSettled): string => {
    if (r.outcome === 'resent') return `${c.paint(GREEN, 'resent')}: ${answered(r.resend)}`
    if (r.outcome === 'failed') return `${c.paint(RED, 'failed')}: ${r.resend !== null ? answered(r.resend) : terminalText(r.error.message)}`
    if (r.reason === 'excluded') return `${c.paint(DIM, 'skipped')}: already resent${stateFile === undefined ? '' : ` (in ${terminalText(stateFile)})`}`
    const off = mismatchText(r)
    if (off !== null) return `${c.paint(YELLOW, 'skipped')}: ${off} (not resent)`
    return `${c.paint(DIM, 'skipped')}: ${r.reason.replace('_', ' ')}`
  }
  let drawn = false
  return {
    update (r, done, total, counts) {
      const line = `[${done}/${total}] batch ${r.batchId} ${describe(r)}`
      if (!tty) {
        c.io.out(line)
        return
      }
      // On a terminal: failures stay on screen above the bar; the bar is redrawn in place.
      if (r.outcome === 'failed') {
        c.io.write!('\r\u001b[K')
        c.io.out(line)
      }
      const width = 30
      const filled = total === 0 ? width : Math.round(width * done / total)
      c.io.write!(`\r\u001b[K[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${done}/${total}  resent ${counts.resent ?? 0}  failed ${counts.failed ?? 0}  skipped ${counts.skipped ?? 0}`)
      drawn = true
    },
    end () {
      if (drawn) c.io.write!('\r\u001b[K')
    },
  }
}

export async function reconcile (c: Context): Promise<number> {
  const dryRun = c.values['dry-run'] === true
  const concurrency = numeric(c.values.concurrency, 'concurrency', c.command)
  const rate = numeric(c.values.rate, 'rate', c.command)
  const maxBatches = numeric(c.values['max-batches'], 'max-batches', c.command)
  if (maxBatches !== undefined && (!Number.isSafeInteger(maxBatches) || maxBatches < 1)) throw new UsageError('--max-batches must be a positive integer.', c.command)
  const stateFile = c.values.state as string | undefined
  const window = windowOptions(c, '3d')
  if (!dryRun && c.values.yes !== true && c.io.confirm === undefined) {
    throw new UsageError('reconcile resends batches: add --yes to confirm (not on a terminal, it cannot ask), or --dry-run to only list them.', c.command)
  }
  let exclude = new Set<number>()
  if (stateFile !== undefined) {
    try {
      exclude = readReconcileState(stateFile)
    } catch (err) {
      if (err instanceof StateFileError) throw new UsageError(err.message, c.command)
      throw err
    }
  }
  const base: ReconcileOptions = { ...window, exclude, ...(concurrency !== undefined ? { concurrency } : {}), ...(rate !== undefined ? { rate } : {}), ...(maxBatches !== undefined ? { maxBatches } : {}) }
  const invalid = checkReconcileOptions(base)
  if (invalid !== null) return fail(c, null, invalid)
  const conn = connect(c)

  if (!dryRun && c.values.yes !== true) {
    // On a terminal without --yes: list first, then ask.
    const preview = await conn.client.webhooks.reconcile({ ...base, dryRun: true })
    if (preview.error !== null) return fail(c, conn, preview.error)
    const todo = preview.data.batches.filter((b) => b.outcome === 'skipped' && b.reason === 'dry_run').length
    if (todo === 0) return summarize(c, preview.data, true, stateFile)
    const yes = await c.io.confirm!(`Resend ${plural(todo, 'failed batch', 'failed batches')} created from ${preview.data.window.createdAfter} to ${preview.data.window.createdBefore}? [y/N] `)
    if (!yes) {
      c.io.err(`${BIN} reconcile: nothing resent.\n`)
      return 1
    }
  }

  const controller = new AbortController()
  const release = c.io.onInterrupt?.(() => controller.abort())
  const resent = new Set(exclude)
  const counts: Record<string, number> = {}
  const view = c.json || dryRun ? null : progressView(c, stateFile)
  let stateError: Error | null = null
  let report
  try {
    report = await conn.client.webhooks.reconcile({
      ...base,
      dryRun,
      signal: controller.signal,
      onProgress ({ done, total, result }) {
        counts[result.outcome] = (counts[result.outcome] ?? 0) + 1
        if (result.outcome === 'resent' && stateFile !== undefined && stateError === null) {
          resent.add(result.batchId)
          try {
            writeReconcileState(stateFile, resent)
          } catch (err) {
            // Keep going: the resends are made; say at the end that the file is behind.
            stateError = err as Error
          }
        }
        view?.update(result, done, total, counts)
      },
    })
  } finally {
    view?.end()
    release?.()
  }
  if (report.error !== null) return fail(c, conn, report.error)
  const code = summarize(c, report.data, dryRun, stateFile)
  if (stateError !== null) {
    c.io.err(`${BIN} reconcile: could not update ${terminalText(stateFile!)} (${terminalText((stateError as Error).message)}); a rerun with it would resend batches already resent.\n`)
    return 1
  }
  return code
}

function summarize (c: Context, report: ReconcileReport, dryRun: boolean, stateFile: string | undefined): number {
  const { summary, window, stopped } = report
  const ok = summary.failed === 0 && stopped === null
  if (c.json) {
    printJson(c, report)
    return ok ? 0 : 1
  }
  const span = `created from ${window.createdAfter} to ${window.createdBefore}`
  // Batches the listing returned although they do not match what was asked for: never resent.
  const mismatched = report.batches.filter(isMismatch).length
  const warnMismatched = (): void => {
    if (mismatched === 0) return
    c.io.err(`${BIN} reconcile: ${c.paint(YELLOW, `the listing returned ${plural(mismatched, 'batch', 'batches')} outside the window or filters asked for`)} (${dryRun ? 'they would not be resent' : 'skipped, not resent'}: the API may have ignored the query; rerun with --json to see them).\n`)
  }
  const failedBatches = summary.total - mismatched
  if (dryRun) {
    const pending = report.batches.filter((b) => b.outcome === 'skipped' && b.reason === 'dry_run').map((b) => b.batch)
    if (pending.length > 0) for (const line of batchTable(pending, c.paint)) c.io.out(line)
    const excluded = report.batches.filter((b) => b.outcome === 'skipped' && b.reason === 'excluded').length
    c.io.out(`${plural(pending.length, 'failed batch', 'failed batches')} would be resent (${span})${excluded > 0 ? `; ${excluded} already resent, skipped` : ''}. Nothing was resent (--dry-run).`)
    warnMismatched()
    return 0
  }
  if (failedBatches === 0) {
    c.io.out(`no failed batch ${span}: nothing to resend`)
    warnMismatched()
    return 0
  }
  const parts = [
    `resent ${summary.resent}`,
    summary.failed > 0 ? c.paint(RED, `failed ${summary.failed}`) : 'failed 0',
    `skipped ${summary.skipped - mismatched}`,
    ...(summary.notAttempted > 0 ? [c.paint(YELLOW, `not attempted ${summary.notAttempted}`)] : []),
  ]
  c.io.out(c.paint(BOLD, `${parts.join(', ')} of ${plural(failedBatches, 'failed batch', 'failed batches')} ${span}`))
  warnMismatched()
  if (stopped !== null) c.io.err(`${BIN} reconcile: ${c.paint(YELLOW, terminalText(stopped.message))}\n`)
  if (!ok) {
    c.io.err(stateFile === undefined
      ? `Run it again to retry what failed${summary.notAttempted > 0 ? ' and what was not attempted' : ''}; add --state <file> so a rerun skips what was resent.\n`
      : `Run it again with --state ${terminalText(stateFile)}: what was resent is skipped.\n`)
  }
  return ok ? 0 : 1
}
