// The library's log lines through Nest's own Logger, so they go wherever the app's logger
// (`app.useLogger`, `bufferLogs`) sends Nest's lines, under the context "MailChannelsWebhooks".
import { Logger as NestLogger } from '@nestjs/common'
import type { Logger } from '../logger.js'
import { terminalText } from '../terminal-text.js'

/** A field of a log line as text: an Error by its message only (never its stack or its properties). */
function replacer (_key: string, value: unknown): unknown {
  return value instanceof Error ? value.message : value
}

/**
 * One line: the message, then its fields as JSON. The fields may carry text from a delivery (its
 * `keyid`), so the line is made safe for a terminal (src/terminal-text.ts).
 */
function line (obj: object, msg: string | undefined): string {
  const fields = JSON.stringify(obj, replacer)
  return terminalText(fields === undefined || fields === '{}' ? (msg ?? '') : `${msg ?? ''} ${fields}`)
}

/** The library's `Logger` over a Nest `Logger` with the context `MailChannelsWebhooks`. */
export function nestLogger (context = 'MailChannelsWebhooks'): Logger {
  const nest = new NestLogger(context)
  return {
    debug: (obj, msg) => { nest.debug(line(obj, msg)) },
    info: (obj, msg) => { nest.log(line(obj, msg)) },
    warn: (obj, msg) => { nest.warn(line(obj, msg)) },
    error: (obj, msg) => { nest.error(line(obj, msg)) },
  }
}
