// The inspector page's script, served as /inspector/app.js (a file, so the page's policy can
// forbid inline script). Every value from the server, which may come from a stranger (event
// fields, a receiver's answer, header values, paths), goes into the page as a text node or an
// attribute value: nothing is ever parsed as markup.
// Kept free of backticks and dollar-brace so it can live in this raw template string.
export const APP_JS = String.raw`'use strict'
;(() => {
  const $ = (id) => document.getElementById(id)
  const mode = document.documentElement.dataset.mode
  const KEY_NAME = 'mailchannels-webhooks-inspector-key'
  const MAX_ROWS = 500
  const WORDS = { accepted: 'accepted', duplicate: 'duplicate', rejected: 'rejected', failed: 'failed', redirected: 'redirected', no_response: 'no response' }
  const GOOD = new Set(['accepted', 'duplicate'])
  const TAMPER = {
    body: 'the body was changed after signing',
    signature: 'signed with a key the sandbox does not serve',
    expired: 'signed an hour ago',
    replay: 'an exact copy of an earlier delivery (same signature)',
  }
  const LOGIN_HINT = "Open the link printed when this server started: it carries this run's key."

  let key = null
  let lastSeq = 0
  let openSeq = null
  let streamCtl = null
  let retryTimer = null
  let typesShown = false
  let filterTypesShown = false
  const rows = new Map()
  // Each row's summary, for the filters: they run here, over the journal the page already holds
  // (at most 500 deliveries, all sent to the page), so a filter applies as you type and to live rows.
  const summaries = new Map()
  const known = new Set()

  class KeyRefused extends Error {}

  // Builds an element. Strings become text nodes; attribute names are always literals here.
  function el (tag, attrs, ...children) {
    const node = document.createElement(tag)
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue
      if (name === 'class') node.className = value
      else node.setAttribute(name, value === true ? '' : String(value))
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue
      node.append(child instanceof Node ? child : String(child))
    }
    return node
  }

  function say (text, bad) {
    const status = $('status')
    status.textContent = text
    status.classList.toggle('bad', bad === true)
  }

  function setLive (state) {
    const live = $('live')
    live.textContent = state === 'live' ? 'Live' : state === 'reconnecting' ? 'Reconnecting…' : state === 'connecting' ? 'Connecting…' : ''
    live.classList.toggle('on', state === 'live')
  }

  const seconds = (ms) => (ms < 1000 ? ms + ' ms' : Math.round(ms / 100) / 10 + ' s')
  const clock = (iso) => {
    const d = new Date(iso)
    return isNaN(d) ? iso : d.toLocaleTimeString([], { hour12: false })
  }

  // The key: from the link's fragment (then removed from the address bar), else from this tab.
  function loadKey () {
    const m = /^#key=([^&]*)/.exec(location.hash)
    if (m !== null) {
      history.replaceState(null, '', location.pathname + location.search)
      let given = null
      try { given = decodeURIComponent(m[1]) } catch {}
      if (given) {
        saveKey(given)
        return given
      }
    }
    try { return sessionStorage.getItem(KEY_NAME) } catch { return null }
  }
  function saveKey (value) {
    try { sessionStorage.setItem(KEY_NAME, value) } catch {}
  }
  function forgetKey (why) {
    key = null
    try { sessionStorage.removeItem(KEY_NAME) } catch {}
    stopStream()
    showLogin(why)
  }

  async function api (path, method) {
    const res = await fetch(path, { method: method || 'GET', headers: { 'x-api-key': key }, cache: 'no-store', credentials: 'omit', redirect: 'error' })
    let body = null
    try { body = await res.json() } catch {}
    if (res.status === 401) {
      forgetKey("This key was refused: each run has its own. Open the link printed when the server started.")
      throw new KeyRefused()
    }
    return { status: res.status, ok: res.ok, body }
  }
  const errorText = (r) => (r.body && Array.isArray(r.body.errors) ? r.body.errors.join(' ') : 'HTTP ' + r.status)
  const failed = (what) => (err) => { if (!(err instanceof KeyRefused)) say(what + ': ' + err.message, true) }

  function showLogin (why) {
    $('login').hidden = false
    $('login-why').textContent = why || LOGIN_HINT
    $('deliveries').hidden = true
    $('detail').hidden = true
    if ($('actions')) $('actions').hidden = true
    setLive('')
    $('login-key').focus()
  }

  async function start () {
    try {
      const r = await api('/inspector/api/info')
      if (!r.ok) return say(errorText(r), true)
      $('login').hidden = true
      renderInfo(r.body)
      $('deliveries').hidden = false
      if ($('actions')) $('actions').hidden = false
      const list = await api('/inspector/api/attempts')
      if (list.ok) for (const summary of list.body.attempts) addRow(summary)
      if (r.body.deadLetters === true) await refreshDeadLetters()
      follow()
    } catch (err) {
      failed('The server does not answer')(err)
    }
  }

  function renderInfo (info) {
    if (!filterTypesShown && Array.isArray(info.eventTypes)) {
      filterTypesShown = true
      for (const type of info.eventTypes) known.add(type)
      $('filter-type').append(...info.eventTypes.map((type) => el('option', { value: type }, type)), el('option', { value: '?other' }, 'other (an unknown type)'))
    }
    const dl = $('info')
    dl.replaceChildren()
    const add = (term, value) => dl.append(el('div', null, el('dt', null, term), el('dd', null, value)))
    if (info.mode === 'sandbox') {
      add('API', info.baseUrl)
      add('customer', info.customerHandle)
      add('key id', info.keyId)
      add('endpoints', info.endpoints.length > 0 ? info.endpoints.join(', ') : 'none enrolled yet')
      // The buttons send to the first enrolled endpoint (the periodic sender sends to each).
      const n = info.endpoints.length
      $('send-target').replaceChildren(...(n === 0
        ? ['No endpoint enrolled yet: enroll one below, then these buttons send to it.']
        : ['These buttons send one batch to ', el('code', { id: 'send-target-url' }, info.endpoints[0]), n > 1 ? ' (the first of the ' + n + ' enrolled endpoints).' : '.']))
      if (!typesShown) {
        typesShown = true
        $('type-list').replaceChildren(...info.eventTypes.map((type) => el('label', null, el('input', { type: 'checkbox', name: 'type', value: type, checked: true }), type)))
      }
    } else {
      add('receiving at', info.receiveUrl)
      add('verifying with', info.verifyWith)
      add('customers', info.customers)
    }
  }

  async function refreshInfo () {
    try {
      const r = await api('/inspector/api/info')
      if (r.ok) renderInfo(r.body)
    } catch {}
  }

  function typeCounts (types) {
    const counts = new Map()
    for (const type of types) counts.set(type, (counts.get(type) || 0) + 1)
    return [...counts].map(([type, n]) => (n > 1 ? type + ' ×' + n : type))
  }
  function typesText (types) {
    const names = typeCounts(types)
    return names.length > 3 ? names.slice(0, 3).join(', ') + ' +' + (names.length - 3) + ' more' : names.join(', ')
  }
  const rowName = (s) => (s.batchId !== null ? '#' + s.batchId + (s.attempt > 1 ? ' · try ' + s.attempt : '') : '#' + s.seq)
  const tone = (s) => (s.warning ? 'warn' : GOOD.has(s.outcome) ? 'ok' : 'bad')

  function outcomeNodes (s) {
    return [
      el('span', { class: 'badge ' + tone(s) }, WORDS[s.outcome] || s.outcome),
      s.reason ? el('code', { class: 'reason-type' }, s.reason.type) : null,
      s.tamper ? el('span', { class: 'tag' }, s.tamper === 'replay' ? 'replay' : 'tampered: ' + s.tamper) : null,
      s.resend ? el('span', { class: 'tag' }, 'resent') : null,
      s.retryInMs !== null ? el('span', { class: 'tag' }, 'retry in ' + seconds(s.retryInMs)) : null,
      s.error ? el('span', { class: 'tag' }, s.error) : null,
      s.warning ? el('span', { class: 'tag warning', title: s.warning }, '⚠ should have been rejected') : null,
    ]
  }

  function addRow (s) {
    if (rows.has(s.seq)) return
    lastSeq = Math.max(lastSeq, s.seq)
    const name = rowName(s)
    const tr = el('tr', { 'data-seq': s.seq, 'data-outcome': s.outcome },
      el('td', { class: 'num time' }, el('time', { datetime: s.at, title: s.at }, clock(s.at))),
      el('td', { class: 'name' }, el('button', { type: 'button', class: 'link open', 'aria-label': 'Details of ' + (s.batchId !== null ? 'batch ' : 'delivery ') + name }, name)),
      el('td', { class: 'endpoint', title: s.endpoint }, s.endpoint),
      el('td', { class: 'events' }, s.eventCount === null ? '—' : String(s.eventCount), ' ', el('span', { class: 'types' }, typesText(s.eventTypes))),
      el('td', { class: 'num status' }, s.statusCode === null ? '—' : String(s.statusCode)),
      el('td', { class: 'num duration' }, s.durationMs + ' ms'),
      el('td', { class: 'outcome' }, outcomeNodes(s)))
    tr.addEventListener('click', () => { openDetail(s.seq) })
    const body = $('list').tBodies[0]
    tr.hidden = !matches(s)
    body.prepend(tr)
    rows.set(s.seq, tr)
    summaries.set(s.seq, s)
    while (body.rows.length > MAX_ROWS) {
      const last = body.rows[body.rows.length - 1]
      rows.delete(Number(last.dataset.seq))
      summaries.delete(Number(last.dataset.seq))
      last.remove()
    }
    $('empty').hidden = true
    showCount()
  }

  function matches (s) {
    const outcome = $('filter-outcome').value
    if (outcome === 'problem' ? GOOD.has(s.outcome) && !s.warning : outcome !== '' && s.outcome !== outcome) return false
    const type = $('filter-type').value
    if (type === '?other' ? !s.eventTypes.some((t) => !known.has(t)) : type !== '' && !s.eventTypes.includes(type)) return false
    const query = $('filter-search').value.trim().toLowerCase()
    if (query === '') return true
    return (s.requestIds || []).concat(s.addresses || []).some((value) => value.toLowerCase().includes(query))
  }
  const filtering = () => $('filter-outcome').value !== '' || $('filter-type').value !== '' || $('filter-search').value.trim() !== ''
  function showCount () {
    let shown = 0
    for (const tr of rows.values()) if (!tr.hidden) shown++
    $('filter-count').textContent = filtering() ? shown + ' of ' + rows.size + ' shown' : ''
    $('no-match').hidden = !(filtering() && shown === 0 && rows.size > 0)
  }
  function applyFilters () {
    for (const [seq, tr] of rows) tr.hidden = !matches(summaries.get(seq))
    showCount()
  }

  function pretty (text) {
    try { return JSON.stringify(JSON.parse(text), null, 2) } catch { return text }
  }

  function headersTable (id, headers) {
    return el('table', { class: 'headers', id },
      el('tbody', null, headers.map(([name, value]) => el('tr', null, el('td', null, name + ':'), el('td', null, value)))))
  }

  function verdictLine (d) {
    const word = WORDS[d.outcome] || d.outcome
    if (d.statusCode === null) return 'No response'
    return (mode === 'sandbox' ? 'The receiver answered ' : 'Verified with the library: answered ') + d.statusCode + ', ' + word
  }

  // The events of the body, one per row (the fields people look for first), each with a line of
  // its other fields beneath.
  const EVENT_COLUMNS = ['event', 'timestamp', 'email', 'recipients', 'request_id']
  const MAX_EVENT_ROWS = 1000
  const fieldText = (value) => (typeof value === 'string' ? value : JSON.stringify(value))
  function eventsTable (body) {
    let events = null
    try { events = JSON.parse(body) } catch {}
    if (!Array.isArray(events)) return el('p', { id: 'detail-events-none' }, 'The body is not a JSON array of events.')
    const groups = events.slice(0, MAX_EVENT_ROWS).map((e, i) => {
      const event = e !== null && typeof e === 'object' && !Array.isArray(e) ? e : { event: e }
      const time = typeof event.timestamp === 'number' ? new Date(event.timestamp * 1000) : null
      const rest = Object.keys(event).filter((name) => !EVENT_COLUMNS.includes(name) && name !== 'customer_handle')
      const cell = (value, cls) => el('td', { class: cls }, value === undefined ? '' : fieldText(value))
      return el('tbody', { class: 'event' },
        el('tr', { class: 'main' },
          el('td', { class: 'num' }, String(i + 1)),
          cell(event.event === undefined ? '—' : event.event, 'nowrap'),
          el('td', { class: 'nowrap time' }, time !== null && !isNaN(time) ? el('time', { datetime: time.toISOString(), title: time.toISOString() }, clock(time.toISOString())) : event.timestamp === undefined ? '' : fieldText(event.timestamp)),
          cell(event.email),
          el('td', null, Array.isArray(event.recipients) ? event.recipients.map(fieldText).join(', ') : event.recipients === undefined ? '' : fieldText(event.recipients)),
          cell(event.request_id, 'mono')),
        rest.length === 0 ? null : el('tr', { class: 'more' }, el('td'), el('td', { colspan: 5 }, rest.map((name) => el('span', null, name + ': ' + fieldText(event[name]))))))
    })
    return el('div', { class: 'scroll' },
      el('table', { class: 'events', id: 'detail-events' },
        el('thead', null, el('tr', null, ['#', 'Event', 'Time', 'Email', 'Recipients', 'Request id'].map((name) => el('th', { scope: 'col', class: name === 'Time' ? 'time' : null }, name)))),
        groups),
      events.length > MAX_EVENT_ROWS ? el('p', { class: 'hint' }, 'and ' + (events.length - MAX_EVENT_ROWS) + ' more (see the body)') : null)
  }

  // The clipboard API where the browser allows it; else the older copy of a selected text field.
  async function copyText (text) {
    try {
      await navigator.clipboard.writeText(text)
      return true
    } catch {}
    const back = document.activeElement
    const area = el('textarea', { readonly: true, class: 'offscreen', 'aria-hidden': 'true' })
    area.value = text
    document.body.append(area)
    area.select()
    let done = false
    try { done = document.execCommand('copy') } catch {}
    area.remove()
    if (back && back.focus) back.focus()
    return done
  }

  function copyButtons (d) {
    const note = el('span', { id: 'copy-status', class: 'hint', role: 'status', 'aria-live': 'polite' })
    const button = (id, label, text, what) => {
      const b = el('button', { type: 'button', id, disabled: text === null, title: text === null ? 'The body was cut short: no exact copy of this delivery exists' : null }, label)
      b.addEventListener('click', async () => {
        note.textContent = (await copyText(text)) ? 'Copied ' + what + '.' : 'The browser did not allow copying.'
      })
      return b
    }
    return el('div', { class: 'copy' },
      button('copy-curl', 'Copy as cURL', d.curl, 'a cURL command that sends the same headers and body'),
      button('copy-body', 'Copy body', d.request.body, 'the body'),
      note)
  }

  function renderDetail (d) {
    $('detail-title').textContent = d.batchId !== null ? 'Batch ' + d.batchId + ', attempt ' + d.attempt : 'Delivery #' + d.seq
    $('detail-endpoint').textContent = 'POST ' + d.endpoint
    const out = $('detail-body')
    out.replaceChildren()
    out.append(el('div', { class: 'reason ' + tone(d), id: 'detail-verdict' },
      el('p', null, el('strong', null, verdictLine(d))),
      d.reason ? el('p', { id: 'detail-reason' }, el('code', null, d.reason.type), ' ', d.reason.message) : null,
      d.warning ? el('p', { class: 'warning' }, d.warning) : null,
      d.error ? el('p', null, 'Why: ' + d.error) : null))

    const facts = el('dl', { class: 'facts' })
    const fact = (term, ...value) => facts.append(el('dt', null, term), el('dd', null, ...value))
    fact('Time', d.at)
    fact(mode === 'sandbox' ? 'Endpoint' : 'Path', d.endpoint)
    fact('Events', d.eventCount === null ? 'the body is not a JSON array' : d.eventCount + (d.eventTypes.length > 0 ? ': ' + typeCounts(d.eventTypes).join(', ') : ''))
    fact('Duration', d.durationMs + ' ms')
    if (d.tamper) fact('Spoiled on purpose', TAMPER[d.tamper] || d.tamper)
    if (d.resend) fact('Resend', 'sent again on request, signed afresh')
    if (d.retryInMs !== null) fact('Retry', 'in ' + seconds(d.retryInMs))
    if (d.remoteAddress) fact('From', d.remoteAddress)
    out.append(facts)

    if (mode === 'sandbox' && d.batchId !== null) {
      const button = el('button', { type: 'button', id: 'resend' }, 'Resend batch ' + d.batchId)
      button.addEventListener('click', () => { resend(d.batchId, button) })
      out.append(el('div', { class: 'buttons' }, button))
    }
    out.append(copyButtons(d))

    out.append(el('h3', null, 'Request headers'), headersTable('detail-headers', d.request.headers))

    const sig = d.signature
    out.append(el('h3', null, 'Signature base'))
    if (sig.base !== null) {
      const sent = Date.parse(d.at) / 1000
      const age = Math.round(sent - sig.created)
      const signed = new Date(sig.created * 1000)
      out.append(el('dl', { class: 'facts' },
        el('dt', null, 'Key id'), el('dd', { class: 'mono' }, sig.keyId),
        el('dt', null, 'Signed'), el('dd', null, (isNaN(signed) ? String(sig.created) : signed.toISOString()) + (isNaN(age) ? '' : age >= 0 ? ' (' + age + ' s before it was ' + (mode === 'sandbox' ? 'sent' : 'received') + ')' : ' (' + -age + ' s in the future)'))),
      el('pre', { id: 'detail-base' }, sig.base))
    } else {
      out.append(el('p', { id: 'detail-base-problem' }, 'No signature base: ' + sig.problem))
    }
    const digest = d.digest
    out.append(el('p', { id: 'detail-digest' }, 'Content-Digest ',
      digest.matches === true ? el('strong', null, 'matches the body') : digest.matches === false ? el('strong', { class: 'warning' }, 'does not match the body') : 'could not be read',
      '. The body hashes to ', el('code', null, digest.computed)))

    out.append(el('h3', null, d.eventCount === null ? 'Events' : 'Events (' + d.eventCount + ')'), d.request.bodyTruncated ? el('p', null, 'The body was cut short: its events are not shown.') : eventsTable(d.request.body))
    out.append(el('h3', null, 'Body (' + d.request.bodyBytes + ' bytes' + (d.request.bodyTruncated ? ', cut short' : '') + ')'), el('pre', { id: 'detail-payload' }, pretty(d.request.body)))
    if (d.curl !== null) {
      out.append(el('details', { id: 'detail-curl-box' },
        el('summary', null, 'As a cURL command (POSIX shell: the same headers and body bytes)'),
        el('pre', { id: 'detail-curl' }, d.curl)))
    }

    out.append(el('h3', null, mode === 'sandbox' ? 'Response' : 'Answer'))
    if (d.response === null) {
      out.append(el('p', null, 'No response' + (d.error ? ': ' + d.error : '') + '.'))
    } else {
      out.append(headersTable('detail-response-headers', [['status', String(d.statusCode)], ...d.response.headers]))
      if (d.response.body !== '') out.append(el('pre', { id: 'detail-response' }, pretty(d.response.body) + (d.response.truncated ? '\n…' : '')))
    }
  }

  async function openDetail (seq) {
    let r
    try {
      r = await api('/inspector/api/attempts/' + seq)
    } catch (err) {
      return failed('The server does not answer')(err)
    }
    if (!r.ok) return say(errorText(r), true)
    openSeq = seq
    for (const [n, tr] of rows) tr.classList.toggle('selected', n === seq)
    renderDetail(r.body)
    $('detail').hidden = false
    document.querySelector('.split').classList.add('open')
    $('detail-title').focus()
  }

  function closeDetail () {
    $('detail').hidden = true
    document.querySelector('.split').classList.remove('open')
    const tr = rows.get(openSeq)
    openSeq = null
    for (const row of rows.values()) row.classList.remove('selected')
    if (tr) tr.querySelector('button').focus()
  }

  async function follow () {
    stopStream()
    const ctl = new AbortController()
    streamCtl = ctl
    setLive('connecting')
    try {
      const res = await fetch('/inspector/api/stream?after=' + lastSeq, { headers: { 'x-api-key': key, accept: 'text/event-stream' }, cache: 'no-store', credentials: 'omit', signal: ctl.signal })
      if (res.status === 401) return forgetKey("This key was refused: each run has its own. Open the link printed when the server started.")
      if (!res.ok || res.body === null) throw new Error('HTTP ' + res.status)
      setLive('live')
      // What changed before the stream listened (an endpoint enrolled between the first look and
      // now, or while reconnecting) sent no event this page saw: look once more.
      refreshInfo()
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader()
      let buffer = ''
      for (;;) {
        const { value, done } = await reader.read()
        if (done) break
        buffer += value
        let end
        while ((end = buffer.indexOf('\n\n')) !== -1) {
          onEvent(buffer.slice(0, end))
          buffer = buffer.slice(end + 2)
        }
      }
    } catch {}
    if (ctl.signal.aborted || key === null) return
    setLive('reconnecting')
    retryTimer = setTimeout(follow, 2000)
  }
  function stopStream () {
    if (streamCtl !== null) streamCtl.abort()
    streamCtl = null
    clearTimeout(retryTimer)
  }
  function onEvent (block) {
    let type = 'message'
    let data = ''
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) type = line.slice(7)
      else if (line.startsWith('data: ')) data += line.slice(6)
    }
    if (type === 'attempt') addRow(JSON.parse(data))
    else if (type === 'info') refreshInfo()
  }

  // The router's dead letters (createInspector's deadLetters option): every stored string is put
  // in as text (el() makes text nodes), never as markup.
  async function refreshDeadLetters () {
    const r = await api('/inspector/api/dead-letters')
    if (!r.ok) return say(errorText(r), true)
    $('dead-letters').hidden = false
    const body = $('dead-letter-list').querySelector('tbody')
    body.replaceChildren(...r.body.items.map((d) => {
      const retry = el('button', { type: 'button', class: 'retry', 'data-fingerprint': d.fingerprint }, 'Retry')
      retry.addEventListener('click', () => {
        act(retry, '/inspector/api/dead-letters/' + encodeURIComponent(d.fingerprint) + '/retry', (b) => 'Retry: ' + b.status + '.')
          .then(() => refreshDeadLetters(), () => {})
      })
      return el('tr', { 'data-fingerprint': d.fingerprint },
        el('td', { class: 'time' }, d.parkedAt), el('td', {}, d.type), el('td', {}, String(d.attempts)),
        el('td', { class: 'error' }, d.error.name + ': ' + d.error.message), el('td', { class: 'mono' }, d.fingerprint), el('td', {}, retry))
    }))
    $('dead-letters-empty').hidden = r.body.items.length > 0
  }

  // The button stays focusable while its request runs (disabling it would drop keyboard focus).
  async function act (button, path, done) {
    if (button.getAttribute('aria-busy') === 'true') return
    button.setAttribute('aria-busy', 'true')
    try {
      const r = await api(path, 'POST')
      if (r.ok) say(done(r.body))
      else say(errorText(r), true)
    } catch (err) {
      failed('The sandbox does not answer')(err)
    } finally {
      button.removeAttribute('aria-busy')
    }
  }
  const answered = (code) => (code === null ? 'got no response' : 'was answered ' + code)

  function resend (batchId, button) {
    say('Resending batch ' + batchId + '…')
    return act(button, '/tx/v1/webhook-batch/' + batchId + '/resend', (b) => 'Batch ' + b.batch_id + ' resent: it ' + answered(b.status_code) + '.')
  }

  function send (button) {
    const tamper = button.dataset.tamper || null
    const types = [...document.querySelectorAll('#type-list input:checked')].map((input) => input.value)
    if (types.length === 0 && tamper !== 'replay') return say('Choose at least one event type.', true)
    const query = new URLSearchParams()
    if (tamper !== 'replay') query.set('types', types.join(','))
    if (tamper !== null) query.set('tamper', tamper)
    say('Sending…')
    return act(button, '/sandbox/deliver?' + query, (b) => 'Batch ' + b.batch_id + ' ' + answered(b.status_code) + '.')
  }

  $('login-form').addEventListener('submit', (event) => {
    event.preventDefault()
    const value = $('login-key').value.trim()
    if (value === '') return
    $('login-key').value = ''
    key = value
    saveKey(value)
    start()
  })
  $('detail-close').addEventListener('click', closeDetail)
  $('filters').addEventListener('submit', (event) => { event.preventDefault() })
  for (const id of ['filter-outcome', 'filter-type', 'filter-search']) $(id).addEventListener('input', applyFilters)
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && !$('detail').hidden) closeDetail()
  })
  if (mode === 'sandbox') {
    for (const id of ['send', 'send-body', 'send-expired', 'send-signature', 'send-replay']) {
      const button = $(id)
      button.addEventListener('click', () => { send(button) })
    }
    const rotate = $('rotate')
    rotate.addEventListener('click', () => act(rotate, '/sandbox/rotate-key', (b) => 'Signing key rotated: the new key id is ' + b.id + '.'))
    $('enroll').addEventListener('submit', (event) => {
      event.preventDefault()
      const input = $('enroll-url')
      const button = $('enroll').querySelector('button')
      act(button, '/tx/v1/webhook?endpoint=' + encodeURIComponent(input.value.trim()), () => 'Enrolled ' + input.value.trim() + '.')
        .then(() => refreshInfo())
    })
  }

  key = loadKey()
  if (key) start()
  else showLogin()
})()
`
