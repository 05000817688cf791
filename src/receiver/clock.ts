import { readClock, type Clock } from '../verify/options.js'

/**
 * The receiver's clock: the wall clock (or the `now` option) held so it never runs backwards.
 *
 * Replay-store entries expire on a monotonic clock (the memory store) or on the store's own
 * clock (Redis), while a signature's `created` is checked against this clock. If it stepped
 * back (an NTP step, a VM restored, a test clock moved), a delivery handled before the step
 * would look fresh again after its store entry expired: a replay window. So each reading is at
 * least the highest earlier reading plus the monotonic time elapsed since: a step back of N
 * seconds is absorbed, and until the process restarts the receiver counts N seconds ahead of
 * the stepped clock (deliveries look N seconds older). A step forward is taken at once.
 */
export class SteadyClock {
  readonly #source: Clock | undefined
  /** The highest (reading - monotonic) seen, in ms. */
  #offset = -Infinity

  constructor (source: Clock | undefined) {
    this.#source = source
  }

  /** Milliseconds since the epoch. */
  now (): number {
    const raw = readClock(this.#source)
    // The web-standard monotonic clock (Node, Workers, Deno, Bun all have it).
    const mono = globalThis.performance.now()
    const offset = raw - mono
    if (offset >= this.#offset) {
      this.#offset = offset
      return raw
    }
    return this.#offset + mono
  }
}
