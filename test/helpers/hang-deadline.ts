import tap from 'tap'

// tap's `timeout` (.taprc) counts from the start of a test file: a file that starts dozens of
// processes one after the other (the CLI tests) needs more wall time the busier the machine is
// (four files at once on two cores, a laptop doing other work), and was failed as "timeout!"
// while every command was still making progress. A file that calls `progressed()` as it goes
// turns that limit into a deadline for hangs only: it fails when nothing progressed for that
// long. On the top-level test, `t.setTimeout(ms)` counts from now and tells the runner, which
// restarts the file's timer (TAP.setTimeout and Spawn's 'message' handler in tapjs'
// src/core/src/tap.ts and spawn.ts, https://github.com/tapjs/tapjs).

/** The file's own limit from the runner (`timeout` in .taprc, `--timeout`), in ms; 0 when none. */
function configuredMs (): number {
  const seconds = Number(process.env.TAP_TIMEOUT ?? 30)
  return Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 0
}

/** Restarts the test file's timeout from now: call it each time the file made progress. */
export function progressed (): void {
  const ms = configuredMs()
  if (ms > 0) tap.setTimeout(ms)
}
