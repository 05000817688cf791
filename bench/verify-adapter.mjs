// verify-bench adapter: the library's public static API, called as a user would.
// Built output (dist/) is measured: run `npx tsc -p tsconfig.build.json` (or `npm run bench`) first.
import { Webhooks } from '../dist/index.js'

export const name = 'mailchannels-webhooks Webhooks.verify'
export const parses = true // returns typed events: compared with "ideal + JSON.parse"
export const payloadType = 'buffer' // the raw body, as a receiver gets it

const customerHandles = ['cust_8f3a2b'] // the fixtures' handle; set as a user should (threat-model T22)

export async function setup () {}

export async function verify (payload, headers, publicKey) {
  const { data } = await Webhooks.verify({ payload, headers, publicKey, customerHandles })
  return data !== null
}
