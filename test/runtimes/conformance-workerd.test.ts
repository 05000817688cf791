// The fetch handler's conformance set in workerd, without nodejs_compat (see helpers/conformance.ts).
import t from 'tap'
import { conformanceIn } from './helpers/conformance.js'

conformanceIn(t, 'workerd')
conformanceIn(t, 'workerd', 'hono')
