// The fake MailChannels API moved to test/helpers/fake-api.ts (one helper for the client, CLI and
// batches-route tests); this re-export keeps the older imports working.
export * from '../../helpers/fake-api.js'
