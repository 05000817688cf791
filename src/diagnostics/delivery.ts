// The diagnostics of one delivery: the receive trace's events and the delivery message. An
// observation exists only when someone subscribed as the delivery arrived (`observing()`), so an
// unobserved delivery reads no clock and builds nothing. Runtime-neutral.
import * as port from '#diagnostics'
import type { DiagnosticsPort, WebhookDeliveryErrorType, WebhookDeliveryMessage, WebhookDeliveryOutcome, WebhookReceiveContext } from './types.js'

const { delivery, receive, now }: DiagnosticsPort = port

/** Whether anyone listens to deliveries now: checked once per delivery, before anything else. */
export function observing (): boolean {
  return delivery.hasSubscribers || receive.hasSubscribers
}

/**
 * One observed delivery, from the body in hand (or a refusal before it) to its outcome. The
 * trace's `end` is published when the receiver returns (`returned`), its `asyncStart`/`asyncEnd`
 * and the delivery message when the outcome is known (`finish`), in that order even when the
 * outcome was known before the receiver returned.
 */
export class DeliveryObservation {
  readonly #context: WebhookReceiveContext
  readonly #startedAt: number
  /** Refused before the body was in hand: nothing was verified. */
  readonly #refused: boolean
  #decidedAt = -1
  #eventCount = 0
  #keyId: string | null = null
  #returned = false
  #result: WebhookDeliveryMessage | null = null

  constructor (bodyBytes: number, refused = false) {
    this.#startedAt = now()
    this.#refused = refused
    this.#context = { bodyBytes }
    receive.start.publish(this.#context)
  }

  /** The delivery verified (before the replay claim). */
  verified (eventCount: number, keyId: string): void {
    this.#eventCount = eventCount
    this.#keyId = keyId
  }

  /** The delivery accepted: its handler runs from now on. */
  accepted (): void {
    this.#decidedAt = now()
  }

  /** The outcome: `rejected` or `duplicate` when decided, `accepted` or `failed` when the handler answered. Once. */
  finish (outcome: WebhookDeliveryOutcome, type: WebhookDeliveryErrorType | null, status: number): void {
    if (this.#result !== null) return
    const at = now()
    const handled = this.#decidedAt >= 0
    const decidedAt = handled ? this.#decidedAt : at
    this.#result = {
      outcome,
      type,
      status,
      eventCount: this.#eventCount,
      bodyBytes: this.#context.bodyBytes,
      keyId: this.#keyId,
      verifyDurationMs: this.#refused ? 0 : decidedAt - this.#startedAt,
      handlerDurationMs: handled ? at - decidedAt : 0,
    }
    if (this.#returned) this.#publish()
  }

  /** The receiver returned its outcome (or its promise) to the adapter. */
  returned (): void {
    this.#returned = true
    receive.end.publish(this.#context)
    if (this.#result !== null) this.#publish()
  }

  #publish (): void {
    const result = this.#result!
    this.#context.result = result
    receive.asyncStart.publish(this.#context)
    receive.asyncEnd.publish(this.#context)
    delivery.publish(result)
  }
}

/** A request refused before its body was in hand (transport checks, body reading, adapter refusals): a trace of its own. */
export function observeRefusal (type: WebhookDeliveryErrorType, status: number): void {
  const observation = new DeliveryObservation(0, true)
  observation.finish('rejected', type, status)
  observation.returned()
}
