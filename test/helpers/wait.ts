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

/** Polls `cond` every 10 ms for up to 5 s; throws naming `what` if it never holds. */
export async function until (cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (cond()) return
    await sleep(10)
  }
  throw new Error(`timed out waiting for ${what}`)
}
