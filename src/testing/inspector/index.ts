export { createInspector } from './receiver.js'
export type { Inspector, InspectorOptions } from './receiver.js'
export type { InspectedSummary, InspectedDetail, InspectedOutcome, InspectedReason, InspectedSignature, HeaderLine } from './describe.js'
