// enroll, list, delete and validate: the endpoint commands.
import { isLoopbackHost } from '../base-url.js'
import { checkEndpoint, checkRequestId, type WebhookValidationResult } from '../client/webhooks.js'
import { endpointAnswer } from '../testing/sandbox/answer.js'
import { terminalText } from '../terminal-text.js'
import { BIN, UsageError } from './args.js'
import { GREEN, oneLine, plural, RED, table } from './io.js'
import { connect, fail, printJson, type Context } from './operator-connection.js'
import { answerText } from './sandbox-commands.js'

export async function enroll (c: Context): Promise<number> {
  const checked = checkEndpoint(c.args[0])
  if (checked.error !== null) return fail(c, null, checked.error)
  const conn = connect(c)
  const r = await conn.client.webhooks.enroll(c.args[0]!)
  if (r.error !== null) return fail(c, conn, r.error)
  if (c.json) printJson(c, r.data)
  else c.io.out(`enrolled ${terminalText(r.data.endpoint)}\nCheck that it answers: ${BIN} validate${conn.sandbox ? ' --sandbox' : ''}`)
  return 0
}

export async function list (c: Context): Promise<number> {
  const conn = connect(c)
  const r = await conn.client.webhooks.list()
  if (r.error !== null) return fail(c, conn, r.error)
  if (c.json) printJson(c, r.data)
  else if (r.data.length === 0) c.io.out(`no endpoint enrolled (enroll one with: ${BIN} enroll <url>${conn.sandbox ? ' --sandbox' : ''})`)
  else for (const url of r.data) c.io.out(terminalText(url))
  return 0
}

export async function remove (c: Context): Promise<number> {
  if (c.values.yes !== true) {
    throw new UsageError('this removes EVERY enrolled endpoint (the API cannot remove just one), and your receivers then get no events. Run it again with --yes to confirm.', c.command)
  }
  const conn = connect(c)
  const r = await conn.client.webhooks.delete()
  if (r.error !== null) return fail(c, conn, r.error)
  if (c.json) printJson(c, r.data)
  else c.io.out(`removed every enrolled endpoint; enroll one again with: ${BIN} enroll <url>${conn.sandbox ? ' --sandbox' : ''}`)
  return 0
}

export async function validate (c: Context): Promise<number> {
  const requestId = c.values['request-id'] as string | undefined
  if (requestId !== undefined) {
    const checked = checkRequestId(requestId)
    if (checked.error !== null) return fail(c, null, checked.error)
  }
  const conn = connect(c)
  const r = await conn.client.webhooks.validate(requestId)
  if (r.error !== null) return fail(c, conn, r.error)
  if (c.json) {
    printJson(c, r.data)
  } else {
    // A JSON answer's code and message are shown in full (bounded) on a line of their own; any
    // other answer, in short on the endpoint's row.
    const said = r.data.results.map((x) => (x.response === null ? null : endpointAnswer(x.response.body)))
    const plain = r.data.results.map((x, i) => [
      x.result === 'passed' ? 'passed' : 'failed',
      x.response === null ? '---' : String(x.response.status),
      terminalText(x.webhook),
      x.response === null ? '(no answer)' : x.result === 'passed' || said[i] === null ? oneLine(x.response.body, 60) : '',
    ])
    // Colour codes add invisible characters: align on the plain text, then paint.
    const lines = table(plain)
    r.data.results.forEach((x, i) => {
      const line = lines[i]!
      c.io.out(x.result === 'passed' ? line.replace('passed', c.paint(GREEN, 'passed')) : line.replace('failed', c.paint(RED, 'failed')))
      if (x.result !== 'passed' && said[i] != null) c.io.out(`  ${answerText(said[i]!)}`)
    })
    const failed = r.data.results.filter((x) => x.result !== 'passed')
    if (failed.length === 0) {
      c.io.out(`all ${plural(r.data.results.length, 'endpoint')} answered 2xx`)
    } else {
      c.io.out(`${failed.length} of ${plural(r.data.results.length, 'endpoint')} did not answer 2xx: ${validateHint(failed)}`)
      const codes = new Set(failed.map((x) => (x.response === null ? null : endpointAnswer(x.response.body)?.code ?? null)))
      if (conn.sandbox && (codes.has('key_unavailable') || codes.has('unknown_key'))) {
        c.io.out(`  The receiver could not get the sandbox's signing key: give its verifier baseUrl: '${conn.baseUrl}'.`)
      }
    }
  }
  return r.data.allPassed ? 0 : 1
}

const isLocal = (webhook: string): boolean => {
  try {
    return isLoopbackHost(new URL(webhook).hostname)
  } catch {
    return false
  }
}

/** What to check about endpoints that failed a validation, worded by where they are. */
function validateHint (failed: WebhookValidationResult[]): string {
  const local = failed.filter((x) => isLocal(x.webhook)).length
  if (local === 0) return 'check that the receiver runs, is reachable from the internet, and answers 2xx to a verified delivery'
  if (local === failed.length) return 'check that the receiver runs on this machine, listens at that address, and answers 2xx to a verified delivery'
  return 'check that each receiver runs (those on this machine at their address, the others reachable from the internet) and answers 2xx to a verified delivery'
}
