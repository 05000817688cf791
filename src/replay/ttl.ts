/** Store TTLs are whole seconds (Redis `EX`); a bad one is a programming error, not a store failure. */
export function checkTtl (ttlSeconds: number, name = 'ttlSeconds'): void {
  if (!Number.isSafeInteger(ttlSeconds) || ttlSeconds < 1) throw new TypeError(`${name} must be a positive integer number of seconds`)
}
