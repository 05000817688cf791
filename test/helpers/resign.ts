import type { KeyObject } from 'node:crypto'
import { signWebhook, type SignedWebhook, type WireEvent } from '../../src/testing/index.js'

/**
 * A signer of deliveries as MailChannels makes them: `sign(events, age)` signs the events `age`
 * seconds in the past, and every call for the same array is a new signature, as a re-signed resend
 * is. Ed25519 signs the same bytes and `created` to the same signature, so a `created` this array
 * was already signed with (`sign(events, 0)`, then `sign(events, 3)` three seconds later: the
 * first delivery again, answered as a duplicate) moves to the nearest second not used yet.
 */
export function resigner (privateKey: KeyObject): (events: readonly WireEvent[], age?: number) => SignedWebhook {
  const signedAt = new WeakMap<readonly WireEvent[], Set<number>>()
  return (events, age = 0) => {
    let used = signedAt.get(events)
    if (used === undefined) signedAt.set(events, used = new Set())
    // The free second nearest to the one asked for, never in the future: moving only further back
    // took resends that asked for an age near maxAge past it.
    const now = Math.floor(Date.now() / 1000)
    const wanted = now - age
    let created = wanted
    for (let d = 1; used.has(created); d++) created = wanted + d <= now && !used.has(wanted + d) ? wanted + d : wanted - d
    used.add(created)
    return signWebhook({ privateKey, events, created })
  }
}
