// The `reconcile --state FILE` file: the batch ids a run has resent, so that a rerun (after a
// crash, Ctrl-C or a stop) skips them. Rewritten atomically after every resend.
import fs from 'node:fs'
import { writePrivateJson } from '../private-json-file.js'

interface StateFile {
  /** What wrote it, so a wrong file is recognised. */
  kind: 'mailchannels-webhooks reconcile state'
  /** Batch ids resent (and accepted by the endpoint), oldest first. */
  resent: number[]
  updatedAt: string
}

const KIND = 'mailchannels-webhooks reconcile state'

/** Thrown for a file that exists but is not a state file: the user must look at it. */
export class StateFileError extends Error {}

/** The ids a state file holds; an empty set when the file does not exist yet. */
export function readReconcileState (file: string): Set<number> {
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new Set()
    throw new StateFileError(`cannot read the state file ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}).`)
  }
  let state: Partial<StateFile>
  try {
    state = JSON.parse(text) as Partial<StateFile>
  } catch {
    throw new StateFileError(`${file} is not a reconcile state file (not JSON); give another --state file, or move this one away.`)
  }
  if (state === null || typeof state !== 'object' || state.kind !== KIND || !Array.isArray(state.resent) || !state.resent.every((id) => Number.isSafeInteger(id) && id > 0)) {
    throw new StateFileError(`${file} is not a reconcile state file; give another --state file, or move this one away.`)
  }
  return new Set(state.resent)
}

/** Writes the ids (a temporary file renamed over the old one, so a crash never leaves half a file). */
export function writeReconcileState (file: string, resent: Iterable<number>): void {
  const state: StateFile = { kind: KIND, resent: [...resent], updatedAt: new Date().toISOString() }
  writePrivateJson(file, state)
}
