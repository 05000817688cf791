// What an endpoint said about a delivery it refused: the error code and message of its JSON
// answer, for the sandbox's terminal lines and the `trigger` command.

/** An endpoint's error code and message, as its JSON answer gave them. */
export interface EndpointAnswer {
  /** `code` (or `type`) of the answer, e.g. `digest_mismatch`; `null` when it has none. At most 100 characters. */
  code: string | null
  /** `message` (or `error`, `detail`) of the answer; `null` when it has none. At most 1000 characters. */
  message: string | null
}

const MAX_CODE_CHARS = 100
const MAX_MESSAGE_CHARS = 1000

const firstString = (record: Record<string, unknown>, names: readonly string[]): string | null => {
  for (const name of names) {
    const value = record[name]
    if (typeof value === 'string' && value.trim() !== '') return value
  }
  return null
}

/**
 * The code and message of a JSON object answer: this library's `{ statusCode, code, error,
 * message }`, and the usual `{ code, message }`, `{ type, message }`, `{ error }` shapes.
 * `null` for any other answer (empty, not JSON, no such fields). The values are raw text from
 * the endpoint, cut to their bound: escape them before printing.
 */
export function endpointAnswer (body: string | null): EndpointAnswer | null {
  if (body === null || body.trim() === '') return null
  let parsed: unknown
  try {
    parsed = JSON.parse(body)
  } catch {
    return null
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return null
  const record = parsed as Record<string, unknown>
  const code = firstString(record, ['code', 'type'])
  // `error` is the message only when there is no `message`: in this library's body it is the
  // HTTP reason ("Service Unavailable").
  const message = firstString(record, ['message', 'error', 'detail'])
  if (code === null && message === null) return null
  return { code: code?.slice(0, MAX_CODE_CHARS) ?? null, message: message?.slice(0, MAX_MESSAGE_CHARS) ?? null }
}
