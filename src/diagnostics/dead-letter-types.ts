// The dead-letter channel: its name and message. Runtime-neutral.

/** The `node:diagnostics_channel` channel of one `DeadLetterMessage` per event parked, retried or discarded. */
export const DEAD_LETTER_DIAGNOSTICS_CHANNEL = 'mailchannels-webhooks:dead-letter'

/**
 * - `parked`: an event's handlers failed `after` times (or failed again on a retry): it is now a dead letter;
 * - `retried`: a retry ran its handlers and they succeeded: the dead letter is gone;
 * - `discarded`: an operator deleted it (`router.discardDeadLetter`, the inspector).
 */
export type DeadLetterAction = 'parked' | 'retried' | 'discarded'

export interface DeadLetterMessage {
  readonly action: DeadLetterAction
  /** The event's type (`hard-bounced`, `unknown`...): a label of fixed values. */
  readonly type: string
  /** The event's fingerprint (for logs and traces; not a metric label: unbounded). */
  readonly fingerprint: string
  /** Failed attempts so far. */
  readonly attempts: number
  /** Where it failed: the router (a delivery) or a BullMQ job that used up its attempts. */
  readonly source: 'router' | 'bullmq'
}
