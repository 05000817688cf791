// The request flow of every webhook adapter, ending included: the receiver's steps (transport
// checks, the raw body, verification, the replay claim), then the answer: the receiver's reply to
// a refused or duplicate delivery, the answer of `handlers` / `enqueue`, or the application's
// handler, whose status settles the claim. An adapter only translates its framework's request and
// response to a `WebhookIO` (the shape of octokit/webhooks.js's createMiddleware:
// https://github.com/octokit/webhooks.js/tree/main/src/middleware). Runtime-neutral.
import type { KeyStore } from '../keys/key-store.js'
import type { Logger } from '../logger.js'
import { answerDelivery, errorMessage, handlerErrorReply } from './answer.js'
import { keyStoreFactory, type WebhookReceiverOptions } from './options.js'
import { createStandaloneReceiver, type AcceptedOutcome, type Receiver, type ReceiveOutcome, type RequestPort } from './receiver.js'
import type { Reply } from './reply.js'

/**
 * Reports the status the application's handler answered an accepted delivery with: a 2xx marks
 * it handled, any other status releases its replay claim so MailChannels' retry is handled. With
 * `error`, the handler failed: it is logged (its message only). Only the first call counts.
 */
export type SettleHandler = (outcome: AcceptedOutcome, status: number, error?: unknown) => void

/**
 * What an adapter gives the flow: its framework's request and response, for a request context
 * `C` of its own (the Request, or the request with its response) and its answer `T`.
 */
export interface WebhookIO<C, T> extends RequestPort<C> {
  /** The request's own logger (Fastify's `request.log`); without it, the flow's logger. */
  log? (ctx: C): Logger
  /** Sends a reply of the receiver's: a refusal, a duplicate, or the answer of `handlers` / `enqueue`. */
  reply (ctx: C, reply: Reply): T
  /**
   * Runs the application's handler with a verified delivery (only when neither `handlers` nor
   * `enqueue` is given), and reports its status with `settle`, at once or later (Express: when
   * the response ends), whether or not the client is still connected. A throw or a rejection is
   * the handler's failure: logged, answered 500 `handler_error` through `reply`, settled 500.
   */
  run (ctx: C, outcome: AcceptedOutcome, settle: SettleHandler): T | Promise<T>
}

/** One adapter's flow: its receiver, its logger, and `handle`, the whole of one request. */
export interface WebhookFlow<C, T> {
  readonly receiver: Receiver
  readonly log: Logger
  /** One request, from its headers to its answer and the settlement of its claim. */
  handle (ctx: C): T | Promise<T>
  /**
   * The ending alone: answers an outcome of `receiver.receive` (for a framework that ran the
   * steps before it in its own hooks, such as Fastify).
   */
  finish (ctx: C, outcome: ReceiveOutcome): T | Promise<T>
}

/** Options of `createWebhookFlow`: the adapter's options, and what it adds to the receiver's. */
export interface FlowSetup {
  /** The adapter's own option names besides the receiver's and `logger` (validated by the adapter). */
  extra?: readonly string[]
  /** The key store the adapter owns when neither `publicKey` nor `keyStore` is given. */
  keyStores?: (log: Logger) => (baseUrl: string) => KeyStore
}

/**
 * The flow of an adapter that logs to a `logger` option (Express, the web handler, Hono):
 * options validated once, here (a `TypeError` names a bad or unknown option).
 */
export function createWebhookFlow<C, T> (options: WebhookReceiverOptions & { logger?: Logger }, io: WebhookIO<C, T>, setup: FlowSetup = {}): WebhookFlow<C, T> {
  const { receiver, log } = createStandaloneReceiver(options, setup.extra, setup.keyStores ?? keyStoreFactory)
  return webhookFlow(receiver, log, io)
}

/** The flow of a receiver built elsewhere (a Fastify route's). */
export function webhookFlow<C, T> (receiver: Receiver, log: Logger, io: WebhookIO<C, T>): WebhookFlow<C, T> {
  const answer = receiver.options.answer
  const logOf = io.log === undefined ? () => log : io.log.bind(io)

  const settle: SettleHandler = (outcome, status, error) => {
    if (error !== undefined) log.error({ err: errorMessage(error), keyId: outcome.keyId }, 'mailchannels webhook: the handler failed')
    receiver.settle(outcome, status)
  }

  function failed (ctx: C, outcome: AcceptedOutcome, err: unknown): T {
    settle(outcome, 500, err)
    return io.reply(ctx, handlerErrorReply())
  }

  function finish (ctx: C, outcome: ReceiveOutcome): T | Promise<T> {
    if (outcome.kind !== 'accepted') return io.reply(ctx, outcome.reply)
    // Answered here: the answer settles the claim, even when the client has gone.
    if (answer !== null) return answerDelivery(answer, outcome, logOf(ctx)).then((reply) => io.reply(ctx, reply))
    let ran: T | Promise<T>
    try {
      ran = io.run(ctx, outcome, settle)
    } catch (err) {
      return failed(ctx, outcome, err)
    }
    return ran instanceof Promise ? ran.catch((err: unknown) => failed(ctx, outcome, err)) : ran
  }

  function handle (ctx: C): T | Promise<T> {
    const outcome = receiver.handle(ctx, io, logOf(ctx))
    return outcome instanceof Promise ? outcome.then((o) => finish(ctx, o)) : finish(ctx, outcome)
  }

  return { receiver, log, handle, finish }
}
