// The options every in-process bench that compares built trees shares: --lib (one or more dist/
// folders, side by side), --events, --deliveries, --reps, --cases, --help, plus the bench's own.
import path from 'node:path'
import { parseArgs } from 'node:util'

/**
 * Parses the shared options with this bench's defaults (`defaults.events`, `.deliveries`, `.reps`,
 * `.cases`) and its own `options`; prints `usage` and exits on --help.
 */
export function buildsBenchArgs (usage, defaults, options = {}) {
  const { values: args } = parseArgs({
    options: {
      lib: { type: 'string', default: 'dist' },
      events: { type: 'string', default: defaults.events },
      deliveries: { type: 'string', default: defaults.deliveries },
      reps: { type: 'string', default: defaults.reps ?? '7' },
      cases: { type: 'string', default: defaults.cases },
      ...options,
      help: { type: 'boolean', default: false },
    },
  })
  if (args.help) {
    console.log(usage)
    process.exit(0)
  }
  return {
    args,
    events: Number(args.events),
    deliveries: Number(args.deliveries),
    reps: Number(args.reps),
    libs: args.lib.split(',').map((d) => path.resolve(d)),
    cases: args.cases.split(','),
  }
}
