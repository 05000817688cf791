import { Body, Controller, Inject, Injectable, Post } from '@nestjs/common'
import t from 'tap'
import { MailChannelsWebhook, MailChannelsWebhooksModule, WebhookEvents, type WebhookEvent } from '../../src/nestjs/index.js'
import { delivery, HANDLE, KEYS } from '../fastify/helpers/fixtures.js'
import { PLATFORMS, post, startApp } from './helpers/app.js'

@Injectable()
class Inbox { readonly received: WebhookEvent[][] = [] }

@Controller()
class Hooks {
  constructor (@Inject(Inbox) private readonly inbox: Inbox) {}
  @Post('webhooks/mailchannels')
  @MailChannelsWebhook()
  receive (@WebhookEvents() events: WebhookEvent[]) {
    this.inbox.received.push(events)
    return { received: events.length }
  }
  @Post('api/echo')
  echo (@Body() body: unknown) { return { body } }
}

for (const platform of PLATFORMS) {
  t.test(platform, async (t) => {
    const { url, app } = await startApp(t, platform, { imports: [MailChannelsWebhooksModule.forRoot({ publicKey: KEYS.publicKey, customerHandles: [HANDLE] })], controllers: [Hooks], providers: [Inbox] })
    const d = delivery()
    const a = await post(`${url}/webhooks/mailchannels`, { ...d.headers }, d.body)
    t.equal(a.status, 200, a.text)
    const b = await post(`${url}/webhooks/mailchannels`, { ...d.headers }, d.body)
    t.equal(b.status, 200, b.text)
    t.same(b.json(), { duplicate: true })
    const e = await post(`${url}/api/echo`, { 'content-type': 'application/json' }, '{"a":1}')
    t.equal(e.status, 201, e.text)
    t.same(app.get(Inbox).received.length, 1)
  })
}
