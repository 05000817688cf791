// The fetch handler's conformance set in Vercel's edge-runtime (see helpers/conformance.ts).
import t from 'tap'
import { conformanceIn } from './helpers/conformance.js'

conformanceIn(t, 'edge-runtime')
