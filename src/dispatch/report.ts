// What became of each event of one dispatch: a status byte per event while it runs, and the
// `DispatchReport` built from them at its end.
import type { WebhookEvent } from '../events/types.js'
import type { DispatchReport, EventOutcome } from './types.js'

// Where an event stands while a dispatch runs, one byte per event (outcome objects are built
// only when the report's `outcomes` is read: a receiver that answers 200 never reads them).
// 0: not settled yet.
export const HANDLED = 1
export const SKIPPED = 2
export const UNHANDLED = 3
export const DEFERRED = 4
export const FAILED = 5
/** Its handlers failed `deadLetters.after` times: parked as a dead letter, completed (src/dispatch/dead-letters.ts). */
export const PARKED = 6
const STATUS_NAMES = [undefined, 'handled', 'skipped', 'unhandled', 'deferred', 'failed'] as const

/** The statuses, fingerprints and errors of one dispatch's events, by event index. */
export class Outcomes {
  readonly status: Uint8Array
  readonly fingerprints: string[]
  /** By event index: the error of a failed event. */
  errors: unknown[] | undefined
  /** Copies of an earlier event of the dispatch: their index, and the index of their first copy. */
  #duplicates: number[] | undefined
  #originals: number[] | undefined

  constructor (readonly events: readonly WebhookEvent[]) {
    this.status = new Uint8Array(events.length)
    this.fingerprints = new Array(events.length).fill('')
  }

  fail (i: number, error: unknown): void {
    this.status[i] = FAILED
    ;(this.errors ??= [])[i] = error
  }

  /** Event `i` is parked as a dead letter, with its handlers' last error. */
  park (i: number, error: unknown): void {
    this.status[i] = PARKED
    ;(this.errors ??= [])[i] = error
  }

  /** Event `i` is a copy of event `original`: it is reported as that one is (`skipped` once it was handled). */
  duplicate (i: number, original: number): void {
    (this.#duplicates ??= []).push(i)
    ;(this.#originals ??= []).push(original)
  }

  /** The report, once every event is settled. */
  report (): DispatchReport {
    const duplicates = this.#duplicates
    if (duplicates !== undefined) {
      for (let d = 0; d < duplicates.length; d++) {
        const i = duplicates[d]!
        const o = this.#originals![d]!
        const status = this.status[o]!
        if (status === FAILED) this.fail(i, this.errors![o])
        else if (status === PARKED) this.park(i, this.errors![o])
        else this.status[i] = status === HANDLED ? SKIPPED : status
      }
    }
    return report(this.events, this.status, this.fingerprints, this.errors)
  }
}

/**
 * The report of a dispatch, its counts taken now; `outcomes` is an enumerable property built on
 * first read (one object per event) and kept.
 */
export function report (events: readonly WebhookEvent[], status: Uint8Array, fingerprints: readonly string[], errors: unknown[] | undefined): DispatchReport {
  let handled = 0
  let skipped = 0
  let unhandled = 0
  let deferred = 0
  let failed = 0
  let parked = 0
  for (let i = 0; i < status.length; i++) {
    switch (status[i]) {
      case HANDLED: handled++; break
      case SKIPPED: skipped++; break
      case UNHANDLED: unhandled++; break
      case DEFERRED: deferred++; break
      case PARKED: parked++; break
      default: failed++
    }
  }
  let outcomes: EventOutcome[] | undefined
  // `outcomes` is an own enumerable getter, built on first read: a receiver that answers 200
  // never reads it. Written in the literal (defineProperty on a built object cost ~2 µs a delivery).
  const result: DispatchReport = {
    get outcomes () {
      return (outcomes ??= Array.from(events, (event, i): EventOutcome => {
        const s = status[i]!
        // A status never set is a bug caught by dispatch's fallback; reported failed, never lost.
        return s === HANDLED || s === SKIPPED || s === UNHANDLED || s === DEFERRED
          ? { status: STATUS_NAMES[s], event, fingerprint: fingerprints[i]! }
          : { status: s === PARKED ? 'parked' : 'failed', event, fingerprint: fingerprints[i]!, error: errors?.[i] }
      }))
    },
    handled,
    skipped,
    unhandled,
    deferred,
    failed,
    parked,
    ok: deferred === 0 && failed === 0,
  }
  return result
}
