// `trigger`: one delivery of a chosen event type, now, from the running sandbox to its enrolled
// endpoint, and what the endpoint answered (as `stripe trigger` does for Stripe's events).
import { WEBHOOK_EVENT_TYPES } from '../events/types.js'
import type { EndpointAnswer } from '../testing/sandbox/answer.js'
import { BIN, HELP_OPTION, integer, optionsHelp, suggest, UsageError, type CommandSpec } from './args.js'
import { GREEN, oneLine, painter, RED, type CliIo } from './io.js'
import { answerText, findSandbox, SANDBOX_PORT_HELP, SANDBOX_PORT_OPTION, sandboxPort, verdict } from './sandbox-commands.js'
import { terminalJson, terminalText } from '../terminal-text.js'

/** Events one trigger sends at most (the sandbox's largest batch). */
const MAX_COUNT = 1000

export const TRIGGER_COMMANDS: Record<string, CommandSpec> = {
  trigger: {
    options: {
      count: { type: 'string', value: '<n>' },
      ...SANDBOX_PORT_OPTION,
      json: { type: 'boolean' },
      ...HELP_OPTION,
    },
    args: { name: '<event-type>', min: 1, max: 1 },
    help: () => `Usage: ${BIN} trigger <event-type> [options]

Has the running sandbox deliver one batch of <event-type> events now, signed as
MailChannels signs them, to its first enrolled endpoint, in one attempt (no retry),
and prints what the endpoint answered: its status and, for a failure, the error code
and message of its JSON answer. The batch is recorded like the others: list it with
'${BIN} batches --sandbox', deliver it again with
'${BIN} resend <id> --sandbox'.

Event types: ${WEBHOOK_EVENT_TYPES.slice(0, 6).join(', ')},
${WEBHOOK_EVENT_TYPES.slice(6).join(', ')}

Options:
${optionsHelp([
  ['--count <n>', `Events in the delivery, 1 to ${MAX_COUNT} (default 1)`],
  SANDBOX_PORT_HELP,
  ['--json', 'Print { "data": ..., "error": ... } as JSON, for scripts'],
  ['-h, --help', 'Show this help'],
])}

Exit codes: 0 the endpoint answered 2xx, 1 it did not (or no sandbox, or no endpoint
enrolled), 2 a usage error.`,
  },
}

/** What the sandbox's `POST /sandbox/deliver` answers. */
interface Delivered {
  batch_id: number
  created_at: string
  event_count: number
  status: string
  status_code: number | null
  webhook: string
  duration: { unit: string, value: number }
  answer: EndpointAnswer | null
  /** Why there was no response, when there was none. */
  error: string | null
}

export async function runTrigger (command: string, values: Record<string, string | boolean>, args: string[], io: CliIo, env: NodeJS.ProcessEnv): Promise<number> {
  const json = values.json === true
  const paint = painter(io.color === true && !json)
  const type = args[0]!
  if (!(WEBHOOK_EVENT_TYPES as readonly string[]).includes(type)) {
    throw new UsageError(`'${oneLine(type, 40)}' is not an event type.${suggest(type, [...WEBHOOK_EVENT_TYPES])} Event types: ${WEBHOOK_EVENT_TYPES.join(', ')}.`, command)
  }
  const count = integer(values.count, 'count', command, 1, MAX_COUNT) ?? 1
  const port = sandboxPort(values, command)
  const state = findSandbox(env, port, command)

  const failed = (message: string, todo: string | null): number => {
    if (json) io.out(terminalJson(JSON.stringify({ data: null, error: { message } }, null, 2)))
    io.err(`${BIN} ${command}: ${terminalText(message)}${todo === null ? '' : `\n  ${todo}`}\n`)
    return 1
  }
  const url = new URL(`${state.baseUrl}/sandbox/deliver`)
  url.searchParams.set('types', Array.from({ length: count }, () => type).join(','))
  url.searchParams.set('attempts', '1')
  let res: Response
  try {
    // The sandbox waits for the endpoint's answer, which has its own 10 s limit.
    res = await fetch(url, { method: 'POST', headers: { 'x-api-key': state.apiKey }, signal: AbortSignal.timeout(30_000), redirect: 'manual' })
  } catch {
    return failed(`the sandbox at ${state.baseUrl} does not answer; it may have stopped without cleaning up.`, `Start one with: ${BIN} sandbox`)
  }
  const body = await res.json().catch(() => null) as (Delivered & { errors?: unknown }) | null
  if (!res.ok || body === null) {
    const why = Array.isArray(body?.errors) ? oneLine(body.errors.filter((e) => typeof e === 'string').join(' '), 500) : `HTTP ${res.status}`
    if (res.status === 409) return failed(why, `Enroll your endpoint first: ${BIN} enroll <url> --sandbox${port === undefined ? '' : ` --sandbox-port ${port}`}`)
    if (res.status === 401) return failed(`the sandbox at ${state.baseUrl} refused the saved API key: ${why}`, 'Restart the sandbox.')
    return failed(why, null)
  }
  const ok = body.status_code !== null && body.status_code >= 200 && body.status_code < 300
  if (json) {
    io.out(terminalJson(JSON.stringify({ data: { batchId: body.batch_id, eventType: type, eventCount: body.event_count, webhook: body.webhook, statusCode: body.status_code, durationMs: body.duration.value, answer: body.answer, error: body.error ?? null }, error: null }, null, 2)))
    return ok ? 0 : 1
  }
  const { word } = verdict(body.status_code)
  const status = body.status_code === null ? 'no response' : `${body.status_code} ${word}`
  const events = `${body.event_count} ${terminalText(type)} ${body.event_count === 1 ? 'event' : 'events'}`
  io.out(`batch ${body.batch_id}: ${events} to ${terminalText(body.webhook)}: ${ok ? paint(GREEN, status) : paint(RED, status)} (${body.duration.value} ms)`)
  if (!ok) {
    const said = body.status_code === null ? oneLine(String(body.error ?? ''), 200) : answerText(body.answer)
    if (said !== '') io.out(`  ${said}`)
    io.out(`Fix the receiver, then deliver the batch again: ${BIN} resend ${body.batch_id} --sandbox`)
  }
  return ok ? 0 : 1
}
