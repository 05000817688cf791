/** A keyid the library will look up: ASCII, URL-safe, bounded (it becomes part of the key URL). */
export const KEY_ID_PATTERN = /^[A-Za-z0-9._~-]{1,64}$/

/** How a rule-breaking key id is described in messages. */
export const KEY_ID_RULE = '1 to 64 characters from A-Z a-z 0-9 . _ ~ -'

export function isKeyId (value: unknown): value is string {
  return typeof value === 'string' && KEY_ID_PATTERN.test(value)
}
