export { generateSigningKeyPair, signWebhook, toWireEvent } from './sign-webhook.js'
export type { SigningKeyPair, SignWebhookOptions, SignedWebhook, WireEvent } from './sign-webhook.js'
export { createSandbox, sampleEvents } from './sandbox/index.js'
export type { Sandbox, SandboxOptions, DeliverOptions, StartOptions, AttemptDetail, SandboxStats, SandboxBatch, SandboxBatchStatus, TamperKind, SampleEventsOptions, SandboxResend, SandboxValidation } from './sandbox/index.js'
