// The module's receiver: one request pipeline (src/receiver/pipeline.ts) for every route marked
// @MailChannelsWebhook(), the WebhookEventRouter of the @OnWebhookEvent handlers, and the start-up
// checks (options, the raw body, the handlers). Built the way Nest's own modules discover their
// handlers (@nestjs/event-emitter's EventSubscribersLoader: DiscoveryService and MetadataScanner).
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { OnModuleInit } from '@nestjs/common'
import type { DiscoveryService, HttpAdapterHost, MetadataScanner } from '@nestjs/core'
import { WebhookEventRouter } from '../dispatch/router.js'
import type { WebhookEventName } from '../dispatch/types.js'
import type { Logger } from '../logger.js'
import type { EventHandlerContext } from '../receiver/options.js'
import { answerDelivery } from '../receiver/answer.js'
import { resolveEventAnswer, type EventAnswer } from '../receiver/options.js'
import { createWebhookPipeline, type WebhookPort } from '../receiver/pipeline.js'
import { errorReply, type Reply } from '../receiver/reply.js'
import { settleOnEnd } from '../receiver/node/reply.js'
import { nestLogger } from './logger.js'
import { readNestBody, RAW_BODY_FIX, type NestBodySource, type Platform } from './read-body.js'
import { metadata, nodeRequest, takesWebhookEvents, verifiedEvents, WEBHOOK_HANDLER, WEBHOOK_ROUTE } from './metadata.js'
import type { MailChannelsWebhooksModuleOptions } from './options.js'

/** How the routes answer a verified delivery. */
export type AnswerMode = 'route' | 'handlers' | 'enqueue'

/** One request as the pipeline sees it: the platform's request, and the Node request and response under it. */
interface NestContext extends NestBodySource { res: ServerResponse }

/** What the pipeline answers the guard: a reply of the library's to send, or null (the route's method runs). */
type Verdict = Reply | null

/** The pipeline of the module's routes (src/receiver/pipeline.ts), and what its port's `run` is handed. */
type Pipeline = ReturnType<typeof createWebhookPipeline<NestContext, Verdict>>
type Run = WebhookPort<NestContext, Verdict>['run']
type AcceptedOutcome = Parameters<Run>[1]
type SettleHandler = Parameters<Run>[2]

/** The answer to any method but POST. */
const METHOD_NOT_ALLOWED: Reply = (() => {
  const reply = errorReply(405, 'method_not_allowed', 'Webhook deliveries are POST requests.')
  reply.headers.allow = 'POST'
  return reply
})()

/** The router options, taken out of the module's options before the receiver's are validated. */
const ROUTER_OPTIONS = ['seenEvents', 'concurrency', 'claimLifetime'] as const

interface AdapterLike {
  getType?: () => string
  getInstance?: () => unknown
  registerParserMiddleware?: (prefix?: string, rawBody?: boolean) => unknown
  useBodyParser?: (type: unknown, rawBody?: boolean, ...rest: unknown[]) => unknown
}

interface FastifyLike {
  addHook (name: 'onRoute', hook: (route: FastifyRouteLike) => void): unknown
}
type EarlyHook = (request: FastifyRequestLike, reply: FastifyReplyLike, done: () => void) => void
interface FastifyRouteLike { handler?: unknown, onRequest?: EarlyHook | EarlyHook[] }
interface FastifyRequestLike { method: string, headers: IncomingMessage['headers'] }
interface FastifyReplyLike { code (status: number): FastifyReplyLike, headers (h: Record<string, string>): FastifyReplyLike, send (body: unknown): unknown }

/**
 * The receiver of `MailChannelsWebhooksModule`: injectable anywhere (`@Inject(MailChannelsWebhooksReceiver)`).
 * `router` is the `WebhookEventRouter` the `@OnWebhookEvent` handlers are registered on (hand it
 * to `createWebhookEventWorker` from `mailchannels-webhooks/bullmq` in a worker).
 */
export class MailChannelsWebhooksReceiver implements OnModuleInit {
  /** The router of the `@OnWebhookEvent` handlers, with the module's `seenEvents` store. */
  readonly router: WebhookEventRouter<EventHandlerContext, any>
  #answers: AnswerMode = 'route'
  readonly #options: Omit<MailChannelsWebhooksModuleOptions, typeof ROUTER_OPTIONS[number]>
  readonly #log: Logger
  readonly #discovery: DiscoveryService
  readonly #scanner: MetadataScanner
  readonly #seenEvents: boolean
  readonly #pipeline: Pipeline
  /** With `@OnWebhookEvent` handlers (and no `enqueue`): the router's answer, as the `handlers` option gives it. */
  #dispatch: EventAnswer | null = null
  #platform: Platform | undefined
  /** Whether a body parser of the app's was set up, and whether every one keeps the raw bytes. */
  #parsers = { registered: false, raw: true }

  constructor (options: MailChannelsWebhooksModuleOptions, adapterHost: HttpAdapterHost, discovery: DiscoveryService, scanner: MetadataScanner) {
    if (options === null || typeof options !== 'object') throw new TypeError('MailChannelsWebhooksModule options must be an object')
    if (Object.hasOwn(options, 'handlers')) {
      throw new TypeError('handlers is not an option of MailChannelsWebhooksModule: mark the methods of your providers with @OnWebhookEvent(type), and give seenEvents for exactly once')
    }
    const { seenEvents, concurrency, claimLifetime, ...receiverOptions } = options
    // The library's own messages for bad router options (concurrency, claimLifetime, seenEvents).
    this.router = new WebhookEventRouter({ seenEvents, concurrency, claimLifetime })
    this.#seenEvents = seenEvents !== undefined
    this.#options = receiverOptions
    this.#log = receiverOptions.logger ?? nestLogger()
    this.#discovery = discovery
    this.#scanner = scanner
    // Every receiver option validated now, at start-up, with the receivers' messages. Whether the
    // @OnWebhookEvent handlers answer is known at init (onModuleInit); until then, none.
    this.#pipeline = createWebhookPipeline({ ...receiverOptions, logger: this.#log }, this.#makePort())
    // The adapter is known before the app initializes (NestFactory.create, or @nestjs/testing's
    // createNestApplication), before it sets up its body parsers and routes.
    adapterHost.init$.subscribe(() => { this.#attach(adapterHost.httpAdapter as unknown as AdapterLike | undefined) })
  }

  #makePort (): WebhookPort<NestContext, Verdict> {
    return {
      headers: (ctx) => ctx.raw.headers,
      readBody: readNestBody,
      reply: (_ctx, reply) => reply,
      run: (ctx, outcome, settle) => {
        // The handlers answer: the receivers' own answer step (src/receiver/answer.ts) runs the
        // router, settles the claim with its reply's status, and its reply is sent.
        if (this.#dispatch !== null) return answerDelivery(this.#dispatch, outcome, this.#log)
        verifiedEvents.set(ctx.raw, outcome.events)
        if (outcome.claim !== null) settleOnEnd(ctx.res, outcome, settle)
        return null
      },
    }
  }

  /** Learns the platform and how the app's body parsers are set up; on Fastify, adds the early transport check. */
  #attach (adapter: AdapterLike | undefined): void {
    if (adapter === undefined || adapter === null) return
    this.#platform = adapter.getType?.()
    const parsers = this.#parsers
    // Nest passes the app's `rawBody` option to the adapter when it sets up its parsers (at
    // app.init(), after this): recorded on the way through, to check it at start-up.
    const register = adapter.registerParserMiddleware
    if (typeof register === 'function') {
      adapter.registerParserMiddleware = function (this: unknown, prefix?: string, rawBody?: boolean) {
        parsers.registered = true
        if (rawBody !== true) parsers.raw = false
        return register.call(this, prefix, rawBody)
      }
    }
    const use = adapter.useBodyParser
    if (typeof use === 'function') {
      adapter.useBodyParser = function (this: unknown, type: unknown, rawBody?: boolean, ...rest: unknown[]) {
        parsers.registered = true
        if (rawBody !== true) parsers.raw = false
        return use.call(this, type, rawBody, ...rest)
      }
    }
    if (this.#platform === 'fastify') {
      // Fastify reads and parses the body before any guard runs: a gzip body would fail its JSON
      // parser, and one over its bodyLimit its reader, both answered by the app's exception layer.
      // So the routes marked @MailChannelsWebhook() get an onRequest hook of their own, which runs
      // the receiver's transport checks (Content-Encoding, Content-Length, Content-Type) first and
      // answers a refusal with the library's reply. Nest copies the method's metadata onto the
      // handler it registers, which is how the route is recognised here.
      const early: EarlyHook = (request, reply, done) => {
        const refused = request.method === 'POST' ? this.#pipeline.check(request.headers, this.#log) : null
        if (refused === null) {
          done()
          return
        }
        // Fastify's early reply from a hook: send, and do not call done().
        reply.code(refused.status).headers(refused.headers).send(refused.body)
      }
      const fastify = adapter.getInstance?.() as FastifyLike | undefined
      fastify?.addHook('onRoute', (route) => {
        if (typeof route.handler !== 'function' || metadata.getMetadata(WEBHOOK_ROUTE, route.handler) !== true) return
        route.onRequest = route.onRequest === undefined ? [early] : [early, ...[route.onRequest].flat()]
      })
    }
  }

  /** At start-up: the handlers found, the routes checked, and how the routes answer. */
  onModuleInit (): void {
    const wrappers = [...this.#discovery.getProviders(), ...this.#discovery.getControllers()]
    let handlers = 0
    const routes: Array<{ name: string, events: boolean }> = []
    for (const wrapper of wrappers) {
      const instance = wrapper.instance as Record<string, unknown> | null | undefined
      if (instance === null || instance === undefined || typeof instance !== 'object' || wrapper.isAlias) continue
      const prototype = Object.getPrototypeOf(instance) as object | null
      if (prototype === null) continue
      for (const name of this.#scanner.getAllMethodNames(prototype)) {
        const method = instance[name]
        if (typeof method !== 'function') continue
        const types = metadata.getMetadata(WEBHOOK_HANDLER, method) as Array<WebhookEventName | readonly WebhookEventName[] | '*'> | undefined
        const where = `${String(wrapper.name)}.${name}`
        if (types !== undefined) {
          if (!wrapper.isDependencyTreeStatic()) {
            throw new Error(`@OnWebhookEvent() on ${where}: the provider is request-scoped (or depends on one), and webhook handlers run outside any request. Make it a singleton provider.`)
          }
          for (const type of types) {
            try {
              this.router.on(type as WebhookEventName, (event, context) => (method as (...a: unknown[]) => unknown).call(instance, event, context))
            } catch (err) {
              throw new TypeError(`@OnWebhookEvent() on ${where}: ${(err as Error).message}`)
            }
            handlers++
          }
        }
        if (metadata.getMetadata(WEBHOOK_ROUTE, method) === true) routes.push({ name: where, events: takesWebhookEvents(instance, name) })
      }
    }

    const { enqueue } = this.#options
    this.#answers = enqueue !== undefined ? 'enqueue' : handlers > 0 ? 'handlers' : 'route'
    if (this.#seenEvents && handlers === 0) {
      throw new TypeError('seenEvents is given, but no method is marked @OnWebhookEvent(type): seenEvents makes the handlers of the module\'s router take effect once; mark your handler methods, or leave seenEvents out')
    }
    if (this.#answers === 'handlers') this.#dispatch = resolveEventAnswer({ handlers: this.router })
    if (routes.length === 0) return

    const answering = routes.filter((r) => r.events && this.#answers !== 'route')
    if (answering.length > 0) {
      const by = this.#answers === 'enqueue' ? 'hands the events to the queue (enqueue)' : 'dispatches the events to the @OnWebhookEvent handlers'
      throw new Error(`@WebhookEvents() on ${answering.map((r) => r.name).join(', ')}: the module ${by} and answers each delivery itself, so the route's method never runs. Leave the parameter out, and handle the events there.`)
    }
    const names = routes.map((r) => r.name).join(', ')
    if (this.#parsers.registered && !this.#parsers.raw) {
      throw new Error(`@MailChannelsWebhook() route ${names}: the app parses request bodies without keeping their exact bytes, which each delivery's signature is verified over. To keep them, ${RAW_BODY_FIX}.`)
    }
    if (this.#platform === 'fastify' && !this.#parsers.registered) {
      throw new Error(`@MailChannelsWebhook() route ${names}: the app was created with bodyParser: false, so Fastify's own parser reads the body without keeping its exact bytes. To keep them, leave bodyParser on and ${RAW_BODY_FIX}.`)
    }
  }

  /**
   * Verifies one request of a route marked `@MailChannelsWebhook()` (the guard's work): null when
   * the route's method is to run (the events are then on `@WebhookEvents()`), else the library's
   * reply to send (a refusal, a duplicate, or the answer of the handlers or the queue).
   */
  verify (req: unknown, res: unknown): Verdict | Promise<Verdict> {
    const raw = nodeRequest(req)
    // MailChannels delivers with POST only (a route marked on @All() or @Get()): 405, as the fetch handler answers.
    if (raw.method !== 'POST') return METHOD_NOT_ALLOWED
    const response = (((res as { raw?: unknown }).raw) ?? res) as ServerResponse
    return this.#pipeline.handle({ req: req as NestContext['req'], raw, res: response, platform: this.#platform })
  }

  /**
   * How the routes answer verified deliveries, known once the app is initialized: `'route'` (the
   * route's method runs), `'handlers'` (the `@OnWebhookEvent` methods, through `router`) or
   * `'enqueue'` (the `enqueue` option).
   */
  get answers (): AnswerMode {
    return this.#answers
  }

  /** The platform under the app (`'express'`, `'fastify'`), once the app has its adapter. */
  get platform (): string | undefined {
    return this.#platform
  }
}
