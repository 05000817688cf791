// What a Nest app learns at start-up: options validated once with the receivers' messages
// (forRoot and forRootAsync), and a clear error when the app parses bodies without rawBody.
import { Controller, Inject, Injectable, Module, Post, Scope } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { ExpressAdapter } from '@nestjs/platform-express'
import { FastifyAdapter } from '@nestjs/platform-fastify'
import t from 'tap'
import { MailChannelsWebhook, MailChannelsWebhooksModule, MailChannelsWebhooksReceiver, OnWebhookEvent, WebhookEvents, type MailChannelsWebhooksModuleOptions, type WebhookEvent } from '../../src/nestjs/index.js'
import { MemoryClaimStore } from '../../src/index.js'
import { delivery, HANDLE, KEYS, OTHER_KEYS, recordingLogger } from '../fastify/helpers/fixtures.js'
import { initError, PLATFORMS, post, startApp } from './helpers/app.js'

@Controller()
class Hooks {
  @Post('hooks')
  @MailChannelsWebhook()
  receive (@WebhookEvents() events: WebhookEvent[]) { return { received: events.length } }
}

/** A configuration provider, as @nestjs/config's ConfigService would be. */
@Injectable()
class Settings {
  get (name: string): string | undefined {
    return ({ MAILCHANNELS_CUSTOMER_HANDLE: HANDLE, MAILCHANNELS_PUBLIC_KEY: KEYS.publicKey } as Record<string, string>)[name]
  }
}
@Module({ providers: [Settings], exports: [Settings] })
class SettingsModule {}

for (const platform of PLATFORMS) {
  t.test(platform, async (t) => {
    t.test('rawBody off: init() fails, saying how to enable it', async (t) => {
      const err = await initError(t, platform, { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], controllers: [Hooks], options: { rawBody: false } })
      t.ok(err, 'init() rejected')
      t.match(err?.message, /Hooks\.receive/)
      t.match(err?.message, /NestFactory\.create\(AppModule, \{ rawBody: true \}\)/)
    })

    t.test('rawBody off with NestFactory.create, as an app starts: init() fails the same way', async (t) => {
      @Module({ imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], controllers: [Hooks] })
      class AppModule {}
      const adapter = platform === 'fastify' ? new FastifyAdapter() : new ExpressAdapter()
      const app = await NestFactory.create(AppModule, adapter, { logger: false, abortOnError: false })
      t.teardown(() => app.close())
      await t.rejects(app.init(), { message: /NestFactory\.create\(AppModule, \{ rawBody: true \}\)/ })
    })

    t.test('without any webhook route, rawBody is not needed', async (t) => {
      t.equal(await initError(t, platform, { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], options: { rawBody: false } }), null)
    })

    t.test('forRootAsync: options from an injected configuration provider', async (t) => {
      const { url } = await startApp(t, platform, {
        imports: [MailChannelsWebhooksModule.forRootAsync({
          imports: [SettingsModule],
          inject: [Settings],
          useFactory: (settings: Settings): MailChannelsWebhooksModuleOptions => ({
            customerHandles: [settings.get('MAILCHANNELS_CUSTOMER_HANDLE')],
            publicKey: settings.get('MAILCHANNELS_PUBLIC_KEY'),
          }),
        })],
        controllers: [Hooks],
      })
      const d = delivery()
      const a = await post(`${url}/hooks`, d.headers, d.body)
      t.equal(a.status, 200, a.text)
      t.strictSame(a.json(), { received: 1 })
    })
  })
}

t.test('Express with bodyParser: false: nothing reads the body before the guard, which reads it itself', async (t) => {
  const { url } = await startApp(t, 'express', { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], controllers: [Hooks], options: { bodyParser: false, rawBody: false } })
  const d = delivery()
  t.strictSame((await post(`${url}/hooks`, d.headers, d.body)).json(), { received: 1 })
})

t.test('Fastify with bodyParser: false: init() fails, saying why', async (t) => {
  const err = await initError(t, 'fastify', { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], controllers: [Hooks], options: { bodyParser: false } })
  t.match(err?.message, /bodyParser: false, so Fastify's own parser reads the body/)
})

t.test('Express: a delivery labelled text/plain (which Nest does not parse) is read from the request and received', async (t) => {
  const { url } = await startApp(t, 'express', { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], controllers: [Hooks] })
  const d = delivery()
  t.strictSame((await post(`${url}/hooks`, { ...d.headers, 'content-type': 'text/plain' }, d.body)).json(), { received: 1 })
})

@Injectable({ scope: Scope.REQUEST })
class ScopedHandler {
  @OnWebhookEvent('delivered')
  handle () {}
}

t.test('@OnWebhookEvent on a request-scoped provider fails the start-up, naming it', async (t) => {
  const err = await initError(t, 'express', { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], providers: [ScopedHandler] })
  t.match(err?.message, /@OnWebhookEvent\(\) on ScopedHandler\.handle: the provider is request-scoped/)
})

t.test('options are validated once, at start-up, with the receivers\' messages', async (t) => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['customerHandles missing', { publicKey: KEYS.publicKey }, /customerHandles is required/],
    ['an unset environment variable in customerHandles', { publicKey: KEYS.publicKey, customerHandles: [undefined] }, /customerHandles/],
    ['a typo', { publicKey: KEYS.publicKey, customerHandles: [HANDLE], customerHandle: HANDLE }, /customerHandle is not a known option/],
    ['bodyLimit', { publicKey: KEYS.publicKey, customerHandles: [HANDLE], bodyLimit: -1 }, /bodyLimit must be a positive integer/],
    ['concurrency', { publicKey: KEYS.publicKey, customerHandles: [HANDLE], concurrency: 0 }, /concurrency must be a positive integer/],
    ['handlers', { publicKey: KEYS.publicKey, customerHandles: [HANDLE], handlers: {} }, /@OnWebhookEvent/],
    ['seenEvents without a handler', { publicKey: KEYS.publicKey, customerHandles: [HANDLE], seenEvents: new MemoryClaimStore() }, /seenEvents is given, but no method is marked @OnWebhookEvent/],
  ]
  for (const [name, options, message] of cases) {
    const err = await initError(t, 'express', { imports: [MailChannelsWebhooksModule.forRoot(options as MailChannelsWebhooksModuleOptions)] })
    t.match(err?.message, message, name)
  }
  // forRootAsync: the factory's options, the same messages.
  const err = await initError(t, 'express', { imports: [MailChannelsWebhooksModule.forRootAsync({ useFactory: () => ({ publicKey: KEYS.publicKey }) as MailChannelsWebhooksModuleOptions })] })
  t.match(err?.message, /customerHandles is required/)
})

@Injectable()
class BadHandler {
  @OnWebhookEvent('hard-bouncd' as 'hard-bounced')
  handle () {}
}

t.test('an unknown event type in @OnWebhookEvent fails the start-up, naming the method', async (t) => {
  const err = await initError(t, 'express', { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], providers: [BadHandler] })
  t.match(err?.message, /@OnWebhookEvent\(\) on BadHandler\.handle: .*hard-bouncd/)
})

@Injectable()
class Handlers {
  @OnWebhookEvent('delivered')
  delivered () {}
}

t.test('a route that takes @WebhookEvents() while the module answers deliveries itself fails the start-up', async (t) => {
  const dispatching = await initError(t, 'express', { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], controllers: [Hooks], providers: [Handlers] })
  t.match(dispatching?.message, /@WebhookEvents\(\) on Hooks\.receive: the module dispatches the events to the @OnWebhookEvent handlers/)
  const queueing = await initError(t, 'fastify', { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], enqueue: () => {} })], controllers: [Hooks] })
  t.match(queueing?.message, /@WebhookEvents\(\) on Hooks\.receive: the module hands the events to the queue/)
})

t.test('log lines go to the logger option, else to Nest\'s logger under the context MailChannelsWebhooks', async (t) => {
  const forged = delivery({ privateKey: OTHER_KEYS.privateKey })
  const { logger, entries } = recordingLogger()
  const withOption = await startApp(t, 'express', { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE], logger })], controllers: [Hooks] })
  t.equal((await post(`${withOption.url}/hooks`, forged.headers, forged.body)).status, 401)
  t.match(entries, [{ level: 'info', obj: { reason: 'signature_invalid', statusCode: 401, keyId: 'mckey' }, msg: 'mailchannels webhook rejected' }])

  const lines: Array<[string, string, string]> = []
  const at = (level: string) => (message: unknown, context?: unknown) => { lines.push([level, String(message), String(context)]) }
  const nestLogger = { log: at('log'), error: at('error'), warn: at('warn'), debug: at('debug'), verbose: at('verbose') }
  const byNest = await startApp(t, 'fastify', { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], controllers: [Hooks], options: { logger: nestLogger } })
  t.equal((await post(`${byNest.url}/hooks`, forged.headers, forged.body)).status, 401)
  t.match(lines.filter(([, , context]) => context === 'MailChannelsWebhooks'), [['log', /^mailchannels webhook rejected \{"reason":"signature_invalid","statusCode":401,"keyId":"mckey"\}$/, 'MailChannelsWebhooks']])
})

t.test('the receiver is injectable and says how routes answer', async (t) => {
  @Injectable()
  class Consumer { constructor (@Inject(MailChannelsWebhooksReceiver) readonly receiver: MailChannelsWebhooksReceiver) {} }
  const { app } = await startApp(t, 'express', { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], controllers: [Hooks], providers: [Consumer] })
  t.equal(app.get(Consumer).receiver.answers, 'route')
  t.equal(app.get(Consumer).receiver.platform, 'express')
})
