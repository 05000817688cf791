import { setTimeout as sleep } from 'node:timers/promises'

/** Resolves true if `p` settles within `ms`, false otherwise. */
export async function within (p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<boolean>((resolve) => { timer = setTimeout(() => resolve(false), ms) })
  try {
    return await Promise.race([p.then(() => true), late])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * How long `until` waits before it takes the condition for one that never holds. A deadline
 * for hangs only: conditions here hold within milliseconds on an idle machine, and take far
 * longer on one busy with other work (`npm test` runs several files at once).
 */
export const UNTIL_DEADLINE_MS = 30_000

/** Polls `cond` every 10 ms for up to UNTIL_DEADLINE_MS; throws naming `what` if it never holds. */
export async function until (cond: () => boolean, what: string): Promise<void> {
  const deadline = performance.now() + UNTIL_DEADLINE_MS
  for (;;) {
    if (cond()) return
    if (performance.now() > deadline) break
    await sleep(10)
  }
  throw new Error(`timed out waiting for ${what}`)
}
