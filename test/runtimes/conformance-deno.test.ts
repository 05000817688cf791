// The fetch handler's conformance set in deno (see helpers/conformance.ts).
import t from 'tap'
import { conformanceIn } from './helpers/conformance.js'

conformanceIn(t, 'deno')
