export {}
export { batchesRoute } from './batches-route.js'
export type { BatchesRouteOptions } from './batches-route.js'
