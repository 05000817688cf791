// The Nest app of this example: a webhook route, handlers as providers, and the module configured
// from the environment. See README.md in this folder.
import { Controller, Inject, Injectable, Module, Post } from '@nestjs/common'
import { MemoryClaimStore } from 'mailchannels-webhooks'
import { MailChannelsWebhook, MailChannelsWebhooksModule, OnWebhookEvent, type DispatchContext, type HardBouncedEvent, type EventHandlerContext, type WebhookEvent } from 'mailchannels-webhooks/nestjs'

/** Your own service: where hard bounces go. */
@Injectable()
export class SuppressionList {
  readonly emails = new Set<string>()
  add (email: string): void { this.emails.add(email) }
}

/**
 * Handlers as providers: found at start-up, with their dependencies injected. `@Inject(...)` names
 * each dependency, so the app runs whether or not the compiler emits decorator metadata (tsx and
 * esbuild do not; tsc and swc with emitDecoratorMetadata do).
 */
@Injectable()
export class BounceHandlers {
  constructor (@Inject(SuppressionList) private readonly suppressions: SuppressionList) {}

  @OnWebhookEvent('hard-bounced')
  suppress (event: HardBouncedEvent, { fingerprint }: DispatchContext<EventHandlerContext>): void {
    // `fingerprint` identifies the event: the key for an idempotent write in your database.
    this.suppressions.add(event.email ?? fingerprint)
  }

  @OnWebhookEvent('*')
  log (event: WebhookEvent): void {
    console.log(`received ${event.event} event`)
  }
}

@Controller('webhooks')
export class WebhooksController {
  // Verified, deduplicated and answered by the module: the events go to the @OnWebhookEvent handlers.
  @Post('mailchannels')
  @MailChannelsWebhook()
  receive (): void {}
}

@Module({
  imports: [
    MailChannelsWebhooksModule.forRootAsync({
      // In an app with @nestjs/config: imports: [ConfigModule], inject: [ConfigService], and read it there.
      useFactory: () => ({
        customerHandles: [process.env.MAILCHANNELS_CUSTOMER_HANDLE], // required: whose deliveries you accept
        baseUrl: process.env.MAILCHANNELS_BASE_URL, // where signing keys come from; unset in production
        publicKey: process.env.MAILCHANNELS_PUBLIC_KEY || undefined,
        seenEvents: new MemoryClaimStore(), // one process; RedisClaimStore or postgresSeenEvents for several
      }),
    }),
  ],
  controllers: [WebhooksController],
  providers: [SuppressionList, BounceHandlers],
})
export class AppModule {}
