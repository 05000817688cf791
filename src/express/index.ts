export {}
export { batchesRouter } from './batches-router.js'
export type { BatchesRouterOptions, BatchesRouterRequest, BatchesMiddleware } from './batches-router.js'
