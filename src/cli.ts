#!/usr/bin/env node
// The `mailchannels-webhooks` command. The one place in the package that prints to stdout.
import { readFileSync, realpathSync } from 'node:fs'
import { createInterface } from 'node:readline/promises'
import { fileURLToPath } from 'node:url'
import { BIN, optionsHelp, parse, UsageError, type CommandSpec, type Parsed } from './cli/args.js'
import { INSPECT_COMMANDS, runInspect } from './cli/inspect-command.js'
import { DEAD_LETTER_COMMANDS, runDeadLetters } from './cli/dead-letters-command.js'
import { filteredIo, useColor, type CliIo } from './cli/io.js'
import { OPERATOR_COMMANDS, runOperatorCommand } from './cli/operator-commands.js'
import { runRotateKey, runSandbox, SANDBOX_COMMANDS } from './cli/sandbox-commands.js'
import { runTrigger, TRIGGER_COMMANDS } from './cli/trigger-command.js'
import { terminalText } from './terminal-text.js'

export type { CliIo } from './cli/io.js'
export { useColor } from './cli/io.js'

const processIo: CliIo = {
  out: (line) => { process.stdout.write(`${line}\n`) },
  err: (text) => { process.stderr.write(text) },
  write: (text) => { process.stdout.write(text) },
  color: useColor(process.stdout, process.env),
  tty: process.stdout.isTTY === true,
  env: process.env,
  confirm: process.stdin.isTTY === true && process.stdout.isTTY === true
    ? async (question) => {
      const rl = createInterface({ input: process.stdin, output: process.stdout })
      try {
        return /^y(es)?$/i.test((await rl.question(question)).trim())
      } finally {
        rl.close()
      }
    }
    : undefined,
  onInterrupt: (stop) => {
    // The first Ctrl-C stops between batches; a second one exits at once.
    const onSignal = (): void => {
      process.stderr.write(`\n${BIN}: stopping after the batches in flight (Ctrl-C again to quit now)\n`)
      stop()
      process.once('SIGINT', () => process.exit(130))
    }
    process.once('SIGINT', onSignal)
    return () => { process.off('SIGINT', onSignal) }
  },
}

export function version (): string {
  // ../package.json from both src/cli.ts and dist/cli.js.
  return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version
}

// Both sections of the main help start their texts at one column.
const OPERATE_ROWS: Array<[string, string]> = [
  ['enroll <url>', "Enroll an endpoint to receive your account's events"],
  ['list', 'List the enrolled endpoints'],
  ['delete --yes', 'Remove every enrolled endpoint'],
  ['validate', 'Have a signed test event sent to each endpoint; show what it answered'],
  ['batches', 'List delivery batches as a table (--status 4xx,5xx,no_response: failed)'],
  ['resend <id>...', 'Deliver batches again'],
  ['reconcile', 'Resend every batch whose delivery failed in a window, once'],
  ['dead-letters', 'List, show, retry or discard the events your router parked'],
]
const SANDBOX_ROWS: Array<[string, string]> = [
  ['sandbox', `Sign webhook deliveries exactly as MailChannels does and POST them to
your endpoint; serve MailChannels' webhook API on 127.0.0.1, and a page
that shows every delivery and sends batches`],
  ['trigger <type>', `Have the running sandbox deliver events of this type now, and show
what your endpoint answered`],
  ['rotate-key', 'Switch the running sandbox to a new signing key'],
  ['inspect', `Receive deliveries, verify them with this library and show each one
with its verdict on a local page`],
]
const COLUMN = Math.max(...[...OPERATE_ROWS, ...SANDBOX_ROWS].map(([name]) => name.length))

export const MAIN_HELP = `Usage: ${BIN} <command> [options]

Operate your MailChannels webhook, and test a receiver on your machine without an account.

Operate the webhook (the API key is read from MAILCHANNELS_API_KEY):
${optionsHelp(OPERATE_ROWS, COLUMN)}

Local sandbox (no account):
${optionsHelp(SANDBOX_ROWS, COLUMN)}

The operating commands take --sandbox to operate the running sandbox instead of
MailChannels (--sandbox-port <n> picks one when several run), --base-url <url>
for another API origin, and --json for scripts.

Options:
${optionsHelp([['-h, --help', 'Show this help; after a command, that command\'s options'], ['-v, --version', 'Show the version']], COLUMN)}

Run '${BIN} <command> --help' for a command's options.
Exit codes: 0 success, 1 the operation failed, 2 a usage error.
Output is coloured on a terminal only, and never when NO_COLOR is set.`

const COMMANDS: Record<string, CommandSpec> = { ...OPERATOR_COMMANDS, ...SANDBOX_COMMANDS, ...TRIGGER_COMMANDS, ...INSPECT_COMMANDS, ...DEAD_LETTER_COMMANDS }

/** Runs the command; resolves with the exit code once it is done (for `sandbox` and `inspect`, once the server has closed). */
export async function main (argv: string[], given: CliIo = processIo): Promise<number> {
  // Every line written goes through the terminal filter, whatever the command prints.
  const io = filteredIo(given)
  const env = io.env ?? process.env
  let parsed: Parsed
  try {
    parsed = parse(argv, COMMANDS)
  } catch (err) {
    if (!(err instanceof UsageError)) throw err
    return usageError(io, err)
  }
  const { command, values, args } = parsed
  if (values.version === true) {
    io.out(version())
    return 0
  }
  if (values.help === true) {
    io.out(command === null ? MAIN_HELP : COMMANDS[command]!.help(env))
    return 0
  }
  if (command === null) return usageError(io, new UsageError('missing command.', null))
  try {
    if (command === 'sandbox') await runSandbox(values, io, env)
    else if (command === 'rotate-key') await runRotateKey(values, io, env)
    else if (command === 'trigger') return await runTrigger(command, values, args, io, env)
    else if (command === 'inspect') await runInspect(values, io, env)
    else if (command === 'dead-letters') return await runDeadLetters(values, args, io, env)
    else return await runOperatorCommand(command, values, args, io, env)
    return 0
  } catch (err) {
    if (err instanceof UsageError) return usageError(io, err)
    io.err(`${BIN} ${command}: ${terminalText((err as Error).message)}\n`)
    return 1
  }
}

function usageError (io: CliIo, err: UsageError): number {
  const where = err.command === null ? BIN : `${BIN} ${err.command}`
  io.err(`${where}: ${terminalText(err.message)}\nRun '${where} --help' for the usage.\n`)
  return 2
}

// Run only as the program (the bin, or `node --import tsx src/cli.ts`), not when imported by a test.
const invoked = process.argv[1] !== undefined ? realpathSync(process.argv[1]) : ''
if (invoked === realpathSync(fileURLToPath(import.meta.url))) process.exitCode = await main(process.argv.slice(2))
