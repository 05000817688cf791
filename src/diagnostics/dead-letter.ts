// Dead-letter diagnostics: one message when an event is parked, retried or discarded, built only
// when someone listens. Runtime-neutral: published through `#diagnostics` (silent off Node).
import * as port from '#diagnostics'
import type { DeadLetterAction, DeadLetterMessage } from './dead-letter-types.js'
import type { Publisher } from './types.js'

const channel: Publisher<DeadLetterMessage> | undefined = (port as { deadLetter?: Publisher<DeadLetterMessage> }).deadLetter

export function publishDeadLetter (action: DeadLetterAction, type: string, fingerprint: string, attempts: number, source: 'router' | 'bullmq'): void {
  if (channel?.hasSubscribers !== true) return
  channel.publish({ action, type, fingerprint, attempts, source })
}
