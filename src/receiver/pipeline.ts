// The one request pipeline every adapter drives (placeholder: the flow of ./flow.ts under the
// pipeline's names while the pipeline is folded into this file).
export { createWebhookFlow as createWebhookPipeline, type WebhookIO as WebhookPort, type WebhookFlow as WebhookPipeline, type SettleHandler } from './flow.js'
