// A Nest application on @nestjs/platform-express and on @nestjs/platform-fastify (created with
// rawBody: true) with a route marked @MailChannelsWebhook() beside an ordinary JSON route, a global
// validation pipe and a global catch-all exception filter, receiving real signed deliveries over
// HTTP: valid, replayed, forged, tampered, oversize, gzip-encoded. Refusals keep the library's
// status, code and body (a global interceptor does not wrap them either); the other route keeps
// Nest's parsing and the app's pipe and filter.
import { gzipSync } from 'node:zlib'
import { All, Body, Catch, type CallHandler, type ExecutionContext, type INestApplication, type NestInterceptor, Controller, HttpException, Inject, Injectable, Post, ValidationPipe, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common'
import { HttpAdapterHost } from '@nestjs/core'
import type { NestExpressApplication } from '@nestjs/platform-express'
import { RouteConfig } from '@nestjs/platform-fastify'
import { IsString } from 'class-validator'
import { map, type Observable } from 'rxjs'
import t, { type Test } from 'tap'
import { MailChannelsWebhook, MailChannelsWebhooksModule, WebhookEvents, type MailChannelsWebhooksModuleOptions, type WebhookEvent } from '../../src/nestjs/index.js'
import { delivery, event, HANDLE, KEYS, OTHER_KEYS } from '../fastify/helpers/fixtures.js'
import { PLATFORMS, post, startApp, type Platform } from './helpers/app.js'

@Injectable()
class Inbox {
  readonly received: WebhookEvent[][] = []
  /** The next deliveries the handler fails (throws) before answering. */
  failures = 0
}

/** The ordinary route's body, validated by the app's global `ValidationPipe` (class-validator). */
class NamedDto {
  @IsString()
  name!: string
}

@Controller()
class Hooks {
  constructor (@Inject(Inbox) private readonly inbox: Inbox) {}

  @Post('webhooks/mailchannels')
  @MailChannelsWebhook()
  receive (@WebhookEvents() events: WebhookEvent[]) {
    if (this.inbox.failures > 0) {
      this.inbox.failures--
      throw new Error('the database is down')
    }
    this.inbox.received.push(events)
    return { received: events.map((e) => e.event) }
  }

  /** A route with Fastify route config of its own, applied after the mark (it replaces the config the mark set). */
  @Post('webhooks/configured')
  @RouteConfig({ owner: 'the app' })
  @MailChannelsWebhook()
  configured (@WebhookEvents() events: WebhookEvent[]) {
    return { received: events.length }
  }

  @All('webhooks/any-method')
  @MailChannelsWebhook()
  anyMethod (@WebhookEvents() events: WebhookEvent[]) {
    return { received: events.length }
  }

  @Post('api/echo')
  echo (@Body() body: NamedDto) {
    return { hello: body.name }
  }
}

// What tsc (emitDecoratorMetadata) writes for these parameters, which the test's TypeScript loader
// (esbuild) does not emit: the global ValidationPipe sees the DTO's class, and the events' Array.
Reflect.defineMetadata('design:paramtypes', [NamedDto], Hooks.prototype, 'echo')
for (const route of ['receive', 'configured', 'anyMethod']) Reflect.defineMetadata('design:paramtypes', [Array], Hooks.prototype, route)

/** The app's global catch-all filter: every error becomes its own shape. */
@Catch()
class EverythingFilter implements ExceptionFilter {
  constructor (private readonly adapterHost: HttpAdapterHost) {}
  catch (exception: unknown, host: ArgumentsHost): void {
    const status = exception instanceof HttpException ? exception.getStatus() : 500
    this.adapterHost.httpAdapter.reply(host.switchToHttp().getResponse(), { filtered: true, status }, status)
  }
}

const HOOK = '/webhooks/mailchannels'

async function app (t: Test, platform: Platform, options: Partial<MailChannelsWebhooksModuleOptions> = {}, setup?: (a: INestApplication) => void) {
  const running = await startApp(t, platform, {
    imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], ...options })],
    controllers: [Hooks],
    providers: [Inbox],
    setup: (a) => {
      a.useGlobalPipes(new ValidationPipe({ validateCustomDecorators: true, whitelist: true, forbidNonWhitelisted: true, transform: true }))
      a.useGlobalFilters(new EverythingFilter(a.get(HttpAdapterHost)))
      setup?.(a)
    },
  })
  return { ...running, inbox: running.app.get(Inbox) }
}

const REFUSAL = { statusCode: Number, code: String, error: String, message: String }

for (const platform of PLATFORMS) {
  t.test(platform, async (t) => {
    t.test('a valid delivery reaches the route with its typed events; the exact resend is a duplicate', async (t) => {
      const { url, inbox } = await app(t, platform)
      const d = delivery({ events: [event(), event({ event: 'hard-bounced', request_id: 'r2' } as never)] })
      const first = await post(url + HOOK, d.headers, d.body)
      t.equal(first.status, 200, first.text)
      t.strictSame(first.json(), { received: ['delivered', 'hard-bounced'] })
      const again = await post(url + HOOK, d.headers, d.body)
      t.equal(again.status, 200)
      t.strictSame(again.json(), { duplicate: true })
      t.equal(inbox.received.length, 1, 'the handler ran once')
      // Bytes JSON.stringify(body) would not give back: the exact bytes are verified, not a re-serialisation.
      const spaced = delivery({ payload: `[ ${JSON.stringify(event({ request_id: 'r3' }), null, 2)} ]\n` })
      t.equal((await post(url + HOOK, spaced.headers, spaced.body)).status, 200)
    })

    t.test('forged, tampered, oversize and gzip deliveries get the library\'s refusal, past the global pipe and filter', async (t) => {
      const { url, inbox } = await app(t, platform, { bodyLimit: 2048 })
      const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
      const f = await post(url + HOOK, forged.headers, forged.body)
      t.equal(f.status, 401)
      t.match(f.json(), { ...REFUSAL, statusCode: 401, code: 'signature_invalid', error: 'Unauthorized' })
      t.match(f.headers.get('content-type'), /^application\/json/)

      const d = delivery()
      const tampered = Buffer.from(d.body.toString().replace('delivered', 'bounced!!'))
      const td = await post(url + HOOK, d.headers, tampered)
      t.equal(td.status, 401)
      t.match(td.json(), { code: 'digest_mismatch' })

      const big = delivery({ events: Array.from({ length: 40 }, (_, i) => event({ request_id: `big-${i}` })) })
      t.ok(big.body.length > 2048)
      const o = await post(url + HOOK, big.headers, big.body)
      t.equal(o.status, 413, o.text)
      t.match(o.json(), { ...REFUSAL, statusCode: 413, code: 'payload_too_large' })

      const z = delivery()
      const g = await post(url + HOOK, { ...z.headers, 'content-encoding': 'gzip' }, gzipSync(z.body))
      t.equal(g.status, 415, g.text)
      t.match(g.json(), { ...REFUSAL, statusCode: 415, code: 'unsupported_media_type' })

      const configured = await post(`${url}/webhooks/configured`, { ...z.headers, 'content-encoding': 'gzip' }, gzipSync(z.body))
      t.equal(configured.status, 415, `with @RouteConfig() too: ${configured.text}`)
      t.match(configured.json(), { ...REFUSAL, statusCode: 415, code: 'unsupported_media_type' })
      t.equal((await post(`${url}/webhooks/configured`, z.headers, z.body)).status, 200, 'and it receives')

      const stale = delivery({ created: Math.floor(Date.now() / 1000) - 3600 })
      const s = await post(url + HOOK, stale.headers, stale.body)
      t.equal(s.status, 401)
      t.match(s.json(), { code: 'signature_expired' })
      t.equal(inbox.received.length, 0, 'the handler never ran')
    })

    t.test('a delivery of 300 kB, within the receiver\'s 1 MiB bodyLimit, is received', async (t) => {
      const big = delivery({ events: Array.from({ length: 1500 }, (_, i) => event({ request_id: `large-${i}`, email: `recipient-${i}@example.com` })) })
      t.ok(big.body.length > 200_000, `${big.body.length} bytes`)
      if (platform === 'express') {
        // Nest's JSON parser on Express refuses more than body-parser's 100 kB by default (docs/nestjs.md).
        const { url } = await app(t, platform)
        t.equal((await post(url + HOOK, big.headers, big.body)).status, 413, 'refused by the parser at its default limit')
      }
      const { url, inbox } = await app(t, platform, {}, (a) => { if (platform === 'express') (a as NestExpressApplication).useBodyParser('json', { limit: '1mb' }) })
      const res = await post(url + HOOK, big.headers, big.body)
      t.equal(res.status, 200, res.text.slice(0, 200))
      t.equal(inbox.received[0]?.length, 1500)
    })

    t.test('a route marked on @All() answers any other method 405 with Allow: POST, and receives POSTs', async (t) => {
      const { url } = await app(t, platform)
      const res = await fetch(`${url}/webhooks/any-method`, { signal: AbortSignal.timeout(15_000) })
      t.equal(res.status, 405)
      t.equal(res.headers.get('allow'), 'POST')
      t.match(await res.json(), { ...REFUSAL, statusCode: 405, code: 'method_not_allowed' })
      const d = delivery()
      t.strictSame((await post(`${url}/webhooks/any-method`, d.headers, d.body)).json(), { received: 1 })
    })

    t.test('a global response-wrapping interceptor wraps the route\'s own answers, never the library\'s replies', async (t) => {
      @Injectable()
      class Wrap implements NestInterceptor {
        intercept (_context: ExecutionContext, next: CallHandler): Observable<unknown> { return next.handle().pipe(map((data) => ({ data }))) }
      }
      const { url } = await app(t, platform, {}, (a) => { a.useGlobalInterceptors(new Wrap()) })
      const d = delivery()
      const first = await post(url + HOOK, d.headers, d.body)
      t.strictSame(first.json(), { data: { received: ['delivered'] } }, 'the route\'s answer, wrapped as the app wraps every answer')
      t.strictSame((await post(url + HOOK, d.headers, d.body)).json(), { duplicate: true }, 'the duplicate reply, as the library sends it')
      const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
      t.match((await post(url + HOOK, forged.headers, forged.body)).json(), { ...REFUSAL, statusCode: 401, code: 'signature_invalid' })
    })

    t.test('the other routes keep Nest\'s JSON parsing, the global pipe and the global filter', async (t) => {
      const { url } = await app(t, platform)
      const ok = await post(`${url}/api/echo`, { 'content-type': 'application/json' }, '{"name":"nest"}')
      t.equal(ok.status, 201)
      t.strictSame(ok.json(), { hello: 'nest' })
      const invalid = await post(`${url}/api/echo`, { 'content-type': 'application/json' }, '{"name":1}')
      t.equal(invalid.status, 400, 'the global pipe refused it')
      t.strictSame(invalid.json(), { filtered: true, status: 400 }, 'answered by the app\'s global filter')
    })

    t.test('a handler that throws is answered by the app\'s filter and releases the claim: the retry runs it again', async (t) => {
      const { url, inbox } = await app(t, platform)
      inbox.failures = 1
      const d = delivery()
      const failed = await post(url + HOOK, d.headers, d.body)
      t.equal(failed.status, 500)
      t.strictSame(failed.json(), { filtered: true, status: 500 })
      const retry = await post(url + HOOK, d.headers, d.body)
      t.equal(retry.status, 200, 'the retry is handled, not a duplicate')
      t.strictSame(retry.json(), { received: ['delivered'] })
      t.equal(inbox.received.length, 1)
    })
  })
}
