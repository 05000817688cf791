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
 * The report of a dispatch, its counts taken now; `outcomes` is an own enumerable property (the
 * first key, as `DispatchReport` lists it) built on first read (one object per event) and kept:
 * a receiver that answers 200 never reads it.
 */
export function report (events: readonly WebhookEvent[], status: Uint8Array, fingerprints: readonly string[], errors: unknown[] | undefined): DispatchReport {
  return new Report(events, status, fingerprints, errors)
}

class Report implements DispatchReport {
  /**
   * One getter for every report, defined on each. A getter written in an object literal is a new
   * function per report, and V8 gives every such object a hidden class of its own, allocated
   * where the garbage collector keeps long-lived objects: a server paid about 1 µs per event of a
   * 1,000-event delivery for it in collections (docs/benchmarks.md).
   */
  static readonly #OUTCOMES: PropertyDescriptor = {
    get (this: Report) { return this.#outcomes() },
    enumerable: true,
    configurable: true,
  }

  declare readonly outcomes: readonly EventOutcome[]
  declare readonly handled: number
  declare readonly skipped: number
  declare readonly unhandled: number
  declare readonly deferred: number
  declare readonly failed: number
  declare readonly parked: number
  declare readonly ok: boolean
  readonly #events: readonly WebhookEvent[]
  readonly #status: Uint8Array
  readonly #fingerprints: readonly string[]
  readonly #errors: unknown[] | undefined
  #built: EventOutcome[] | undefined

  constructor (events: readonly WebhookEvent[], status: Uint8Array, fingerprints: readonly string[], errors: unknown[] | undefined) {
    Object.defineProperty(this, 'outcomes', Report.#OUTCOMES)
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
    const self = this as { -readonly [K in keyof DispatchReport]: DispatchReport[K] }
    self.handled = handled
    self.skipped = skipped
    self.unhandled = unhandled
    self.deferred = deferred
    self.failed = failed
    self.parked = parked
    self.ok = deferred === 0 && failed === 0
    this.#events = events
    this.#status = status
    this.#fingerprints = fingerprints
    this.#errors = errors
  }

  #outcomes (): EventOutcome[] {
    const status = this.#status
    const fingerprints = this.#fingerprints
    const errors = this.#errors
    return (this.#built ??= Array.from(this.#events, (event, i): EventOutcome => {
      const s = status[i]!
      // A status never set is a bug caught by dispatch's fallback; reported failed, never lost.
      return s === HANDLED || s === SKIPPED || s === UNHANDLED || s === DEFERRED
        ? { status: STATUS_NAMES[s], event, fingerprint: fingerprints[i]! }
        : { status: s === PARKED ? 'parked' : 'failed', event, fingerprint: fingerprints[i]!, error: errors?.[i] }
    }))
  }
}
