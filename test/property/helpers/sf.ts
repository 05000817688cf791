import { parseDictionary } from 'structured-headers'

/** The bytes of the single byte-sequence member of a Signature-like dictionary, or null. */
export function structuredHeaderBytes (value: string): Buffer | null {
  try {
    const dict = parseDictionary(value)
    if (dict.size !== 1) return null
    const [item] = dict.values().next().value!
    return item instanceof ArrayBuffer ? Buffer.from(item) : null
  } catch {
    return null
  }
}
