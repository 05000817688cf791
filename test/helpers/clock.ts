/** A settable millisecond clock for `KeyStore({ now })`. */
export interface FakeClock {
  now: () => number
  /** Moves time forward, then lets a few real milliseconds pass (lru-cache memoises `now` for 1 ms). */
  advance: (seconds: number) => Promise<void>
}

export function fakeClock (start = Date.now()): FakeClock {
  let ms = start
  return {
    now: () => ms,
    advance: async (seconds) => {
      ms += seconds * 1000
      await new Promise((resolve) => setTimeout(resolve, 5))
    },
  }
}
