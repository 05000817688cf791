export { generateSigningKeyPair, signWebhook, toWireEvent } from './sign-webhook.js'
export type { SigningKeyPair, SignWebhookOptions, SignedWebhook, WireEvent } from './sign-webhook.js'
