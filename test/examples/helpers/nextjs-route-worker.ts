// The Next.js example route as the edge runtime calls it: the route module's POST for a POST.
import { POST } from '../../../examples/nextjs/app/api/mailchannels/route.js'

export default {
  fetch (request: Request): Promise<Response> | Response {
    if (request.method === 'POST') return POST(request)
    return new Response(null, { status: 405, headers: { allow: 'POST' } })
  },
}
