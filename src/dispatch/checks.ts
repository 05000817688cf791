// The checks of what a router is given (its options, `on`, `dispatch`'s input), each with a
// message that names what was wrong and what to give instead.
import { WEBHOOK_EVENT_TYPES } from '../events/types.js'
import type { Logger } from '../logger.js'
import type { ClaimStore } from '../replay/claim-store.js'

/** Every name a handler can be registered for. */
export const EVENT_NAMES: ReadonlySet<string> = new Set<string>([...WEBHOOK_EVENT_TYPES, 'unknown'])
const NAME_LIST = [...EVENT_NAMES].map((n) => `'${n}'`).join(', ')

export function checkName (name: unknown): string {
  if (typeof name === 'string' && EVENT_NAMES.has(name)) return name
  throw new TypeError(`on() got an unknown event type ${describe(name)}: use one of ${NAME_LIST}, or '*' for every event`)
}

export function checkStore (store: unknown): void {
  const s = store as Partial<Record<keyof ClaimStore, unknown>> | null
  const missing = s === null || typeof s !== 'object'
    ? ['claim', 'complete', 'release', 'extend']
    : (['claim', 'complete', 'release', 'extend'] as const).filter((m) => typeof s[m] !== 'function')
  if (missing.length > 0) {
    throw new TypeError(`seenEvents must be a ClaimStore with claim, complete, release and extend methods (missing: ${missing.join(', ')}); ` +
      'use MemoryClaimStore, RedisClaimStore, postgresSeenEvents or sqliteSeenEvents')
  }
}

export function isSignal (s: unknown): s is AbortSignal {
  return s !== null && typeof s === 'object' && typeof (s as AbortSignal).aborted === 'boolean' && typeof (s as AbortSignal).addEventListener === 'function'
}

export function isLogger (l: unknown): l is Logger {
  if (l === null || typeof l !== 'object') return false
  const x = l as Record<string, unknown>
  return typeof x.debug === 'function' && typeof x.info === 'function' && typeof x.warn === 'function' && typeof x.error === 'function'
}

/** A short description of a wrong value for an error message (never more than 40 characters of it). */
export function describe (value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? value.slice(0, 40) + '…' : value)
  if (typeof value === 'function') return 'a function'
  if (Array.isArray(value)) return 'an array'
  if (value === null) return 'null'
  return typeof value === 'object' ? 'an object' : String(value)
}
