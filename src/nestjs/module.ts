// MailChannelsWebhooksModule: forRoot / forRootAsync through Nest's ConfigurableModuleBuilder
// (https://docs.nestjs.com/fundamentals/dynamic-modules#configurable-module-builder), global, so
// the guard of any controller's route and the receiver reach it from every module.
import { ConfigurableModuleBuilder, Global, Inject, Injectable, Module } from '@nestjs/common'
import { DiscoveryModule, DiscoveryService, HttpAdapterHost, MetadataScanner } from '@nestjs/core'
import { MailChannelsWebhookGuard, MailChannelsWebhookReplyFilter } from './guard.js'
import type { MailChannelsWebhooksModuleOptions } from './options.js'
import { MailChannelsWebhooksReceiver } from './receiver.js'

const builder = new ConfigurableModuleBuilder<MailChannelsWebhooksModuleOptions>({ moduleName: 'MailChannelsWebhooks' })
  .setClassMethodName('forRoot')
  .build()

/** The injection token of the module's options (what `forRoot` took or `forRootAsync`'s factory returned). */
export const MAILCHANNELS_WEBHOOKS_OPTIONS: string | symbol = builder.MODULE_OPTIONS_TOKEN

/**
 * The MailChannels webhooks module: import it once, in the root module.
 *
 * ```ts
 * @Module({ imports: [MailChannelsWebhooksModule.forRoot({ customerHandles: ['acct_1'] })], controllers: [WebhooksController] })
 * export class AppModule {}
 * // or, from ConfigService:
 * MailChannelsWebhooksModule.forRootAsync({
 *   imports: [ConfigModule], inject: [ConfigService],
 *   useFactory: (config: ConfigService) => ({ customerHandles: [config.getOrThrow('MAILCHANNELS_CUSTOMER_HANDLE')] }),
 * })
 * ```
 *
 * Options are validated once, when the module is instantiated (a `TypeError` naming the option,
 * the receivers' messages); the app is checked when it initializes (`rawBody`, the handlers).
 */
export class MailChannelsWebhooksModule extends builder.ConfigurableModuleClass {}

Injectable()(MailChannelsWebhooksReceiver)
Inject(MAILCHANNELS_WEBHOOKS_OPTIONS)(MailChannelsWebhooksReceiver, undefined, 0)
Inject(HttpAdapterHost)(MailChannelsWebhooksReceiver, undefined, 1)
Inject(DiscoveryService)(MailChannelsWebhooksReceiver, undefined, 2)
Inject(MetadataScanner)(MailChannelsWebhooksReceiver, undefined, 3)

Global()(MailChannelsWebhooksModule)
Module({
  imports: [DiscoveryModule],
  providers: [MailChannelsWebhooksReceiver, MailChannelsWebhookGuard, MailChannelsWebhookReplyFilter],
  exports: [MailChannelsWebhooksReceiver, MailChannelsWebhookGuard, MailChannelsWebhookReplyFilter],
})(MailChannelsWebhooksModule)
