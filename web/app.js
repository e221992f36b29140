// The page of `tierkv serve`: a chat over POST /v1/chat/completions (streamed
// as server-sent events) and a live view of the KV cache from GET /v1/cache.
// Plain JavaScript, nothing loaded from elsewhere.
//
// The API key: when the server has one, the page asks for it (or takes it
// from the address, http://HOST:PORT/#key=KEY, and then drops it from the
// address bar). It is kept in this tab's sessionStorage and sent as
// "Authorization: Bearer KEY".
'use strict';

const tierkv = (() => {
  const $ = (id) => document.getElementById(id);
  const POLL_MS = 500, POLL_BUSY_MS = 200;
  const TIERS = ['hot', 'warm', 'cold', 'shared'];
  let key = '';
  let convo = [];            // [{role, content}] of the conversation
  let busy = null;           // {controller, el} while a reply streams
  let pollTimer = 0, polling = false, needKey = false;
  const seenEvents = new Set();
  let lastEventId = 0;
  const lastCounters = {};

  // ---- formatting -------------------------------------------------------------------------
  function fmtBytes(n) {
    if (!Number.isFinite(n)) return '-';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(Math.round(n)) : n.toFixed(n < 10 ? 2 : 1)) + ' ' + u[i];
  }
  function fmtCount(n) { return Number(n || 0).toLocaleString('en-US'); }
  function fmtTokens(x) { return x >= 100 || x === 0 ? String(Math.round(x)) : x.toFixed(1); }
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v; else if (k === 'text') e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }

  // ---- server-sent events -----------------------------------------------------------------
  // A parser fed text in pieces of any size: calls onEvent(data) for each
  // event (its data: lines joined by "\n"), whatever the line endings.
  function sseParser(onEvent) {
    let buf = '', data = [], cr = false;
    function line(l) {
      if (l === '') {
        if (data.length) onEvent(data.join('\n'));
        data = [];
      } else if (l.startsWith('data:')) {
        data.push(l.slice(l.startsWith('data: ') ? 6 : 5));
      } // comments (":") and other fields are ignored
    }
    return {
      feed(text) {
        for (const ch of text) {
          if (cr && ch === '\n') { cr = false; continue; }
          cr = false;
          if (ch === '\n' || ch === '\r') { cr = ch === '\r'; line(buf); buf = ''; } else buf += ch;
        }
      },
      end() { if (buf !== '') line(buf); line(''); buf = ''; },
    };
  }

  // ---- the API ------------------------------------------------------------------------------
  function headers(json) {
    const h = {};
    if (json) h['Content-Type'] = 'application/json';
    if (key) h.Authorization = 'Bearer ' + key;
    return h;
  }
  function errorText(status, body) {
    try {
      const j = JSON.parse(body);
      if (j && j.error && j.error.message) return `${status}: ${j.error.message}`;
    } catch (e) { /* not JSON */ }
    return `HTTP ${status}`;
  }
  function askKey(message) {
    needKey = true;
    $('keyform').hidden = false;
    setConn('key', message || 'API key needed');
    $('key').focus();
  }
  function setConn(state, text) { $('conn').dataset.state = state; $('conn').textContent = text; }

  // ---- chat ----------------------------------------------------------------------------------
  function addMessage(role, text) {
    const m = el('div', { class: 'msg ' + role }, el('span', { class: 'text', text }));
    $('messages').append(m);
    $('messages').scrollTop = $('messages').scrollHeight;
    return m;
  }
  function setMeta(m, text) {
    let meta = m.querySelector('.meta');
    if (!meta) { meta = el('span', { class: 'meta' }); m.append(meta); }
    meta.textContent = text;
  }
  function setBusy(b) {
    busy = b;
    $('send').disabled = !!b;
    $('stop').disabled = !b;
    schedulePoll(0);
  }

  async function send(text) {
    if (busy || !text.trim()) return;
    convo.push({ role: 'user', content: text });
    addMessage('user', text);
    const m = addMessage('assistant', '');
    m.dataset.state = 'streaming';
    const controller = new AbortController();
    setBusy({ controller, el: m });
    const t0 = performance.now();
    let reply = '', finish = null, usage = null, firstAt = 0, failed = null;
    const body = {
      messages: convo, stream: true, stream_options: { include_usage: true },
      max_tokens: Math.max(1, parseInt($('max-tokens').value, 10) || 256),
      temperature: Math.max(0, parseFloat($('temperature').value) || 0),
    };
    try {
      const r = await fetch('/v1/chat/completions', {
        method: 'POST', headers: headers(true), body: JSON.stringify(body), signal: controller.signal,
      });
      if (!r.ok) {
        const t = await r.text();
        if (r.status === 401) askKey('wrong or missing API key');
        throw new Error(errorText(r.status, t));
      }
      const parser = sseParser((data) => {
        if (data === '[DONE]') return;
        const j = JSON.parse(data);
        if (j.error) { failed = j.error.message || 'error'; return; }
        if (j.usage) usage = j.usage;
        const c = j.choices && j.choices[0];
        if (!c) return;
        if (c.delta && c.delta.content) {
          if (!firstAt) firstAt = performance.now();
          reply += c.delta.content;
          m.querySelector('.text').textContent = reply;
          $('messages').scrollTop = $('messages').scrollHeight;
        }
        if (c.finish_reason) finish = c.finish_reason;
      });
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        parser.feed(dec.decode(value, { stream: true }));
      }
      parser.feed(dec.decode());
      parser.end();
      if (failed) throw new Error(failed);
      const secs = (performance.now() - t0) / 1000;
      const rate = usage && firstAt && usage.completion_tokens > 1
        ? ` · ${((usage.completion_tokens - 1) / ((performance.now() - firstAt) / 1000)).toFixed(0)} tokens/s` : '';
      m.dataset.state = 'done';
      m.dataset.finish = finish || '';
      setMeta(m, (usage ? `${usage.prompt_tokens} prompt + ${usage.completion_tokens} tokens · ` : '') +
        `${finish || 'ended'} · ${secs.toFixed(2)} s` + rate);
    } catch (e) {
      if (e.name === 'AbortError') {
        m.dataset.state = 'stopped';
        setMeta(m, `stopped after ${reply.length} characters`);
      } else {
        m.dataset.state = 'error';
        m.classList.add('error');
        setMeta(m, String(e.message || e));
      }
    }
    // a reply (whole or stopped) joins the conversation; without one, the
    // message it answered leaves it too (it stays on the page, to send again)
    if (reply) convo.push({ role: 'assistant', content: reply }); else convo.pop();
    setBusy(null);
  }
  function stop() { if (busy) busy.controller.abort(); }

  // ---- the cache panel -----------------------------------------------------------------------
  function bar(parts, total) {
    const b = el('div', { class: 'bar' });
    for (const [tier, bytes] of parts) {
      const s = el('div', { class: 'seg', 'data-tier': tier, title: `${tier}: ${fmtBytes(bytes)}` });
      s.style.width = total > 0 ? (100 * bytes / total).toFixed(2) + '%' : '0';
      b.append(s);
    }
    return b;
  }
  function tierParts(t) { return TIERS.map((n) => [n, (t[n] && t[n].bytes) || 0]); }
  function kvOf(t) { return TIERS.reduce((a, n) => a + ((t[n] && t[n].bytes) || 0), 0); }

  function renderGauge(c) {
    const b = c.budget, total = b.kv_mem || Math.max(b.peak, b.allocated, 1);
    const pct = (x) => (100 * x / total).toFixed(2) + '%';
    let kv = 0;
    for (const n of TIERS) {
      const bytes = c.tiers[n].bytes;
      kv += bytes;
      $('gauge-' + n).style.width = pct(bytes);
      $('tier-' + n).textContent = fmtBytes(bytes);
      $('tier-' + n).dataset.bytes = bytes;
    }
    $('gauge-meta').style.width = pct(Math.max(0, b.allocated - kv));
    $('gauge-peak').style.left = pct(Math.min(b.peak, total));
    for (const [id, f] of [['mark-low', b.gov_low], ['mark-high', b.gov_high]]) {
      $(id).hidden = !b.kv_mem;
      $(id).style.left = (100 * f).toFixed(2) + '%';
      $(id).title = `governor ${id === 'mark-low' ? 'low' : 'high'} mark: ${Math.round(100 * f)}% = ${fmtBytes(f * b.kv_mem)}`;
    }
    const g = $('gauge');
    g.dataset.allocated = b.allocated;
    g.dataset.budget = b.kv_mem;
    $('gauge-text').textContent = b.kv_mem
      ? `pool ${fmtBytes(b.allocated)} of ${fmtBytes(b.kv_mem)} (${(100 * b.allocated / b.kv_mem).toFixed(1)}%) · ` +
        `peak ${fmtBytes(b.peak)} (${(100 * b.peak / b.kv_mem).toFixed(1)}%) · governor band ` +
        `${Math.round(100 * b.gov_low)}-${Math.round(100 * b.gov_high)}% · ${fmtCount(b.pages)} pages`
      : `pool ${fmtBytes(b.allocated)}, peak ${fmtBytes(b.peak)} · no --kv-mem limit`;
  }

  function renderSeqs(c) {
    const rows = [];
    const maxKv = Math.max(1, ...c.sequences.map((q) => kvOf(q.tiers)));
    for (const q of c.sequences) {
      const tr = el('tr', { class: q.ended == null ? 'live' : 'done', 'data-id': q.id, 'data-state': q.state },
        el('td', { class: 'id', text: q.id.replace(/^chatcmpl-|^cmpl-/, ''), title: q.id }),
        el('td', { text: q.state }),
        el('td', { text: fmtCount(q.tokens),
          title: `${q.prompt_tokens} prompt (${q.reused_tokens} reused) + ${q.generated_tokens} generated` }));
      for (const n of ['hot', 'warm', 'cold']) {
        tr.append(el('td', { class: 'tier-' + n, 'data-bytes': q.tiers[n].bytes, text: fmtTokens(q.tiers[n].tokens),
          title: `${fmtBytes(q.tiers[n].bytes)} in ${n} pages (tokens per KV head and layer)` }));
      }
      tr.append(el('td', { text: fmtBytes(kvOf(q.tiers)), title: `pages: ${fmtBytes(q.allocated)}` }));
      tr.append(el('td', {}, bar(tierParts(q.tiers), maxKv)));
      rows.push(tr);
    }
    $('seqs').querySelector('tbody').replaceChildren(...rows);
    $('seqs-empty').hidden = c.sequences.length > 0;
  }

  function renderLayers(c) {
    const box = $('layers');
    const totals = c.layers.map((l) => kvOf(l));
    const max = Math.max(1, ...totals);
    const kids = [];
    c.layers.forEach((l, i) => {
      const b = bar(tierParts(l), max);
      b.dataset.layer = i;
      for (const n of ['hot', 'warm', 'cold']) b.dataset[n] = l[n].bytes;
      kids.push(el('span', { class: 'lname', text: 'L' + i }), b,
        el('span', { class: 'lbytes', text: fmtBytes(totals[i]) }));
    });
    box.replaceChildren(...kids);
    $('layers-of').textContent = c.layers_of === 'live'
      ? `(live sequences, ${c.n_kv_head} KV heads each)` : `(last finished: ${c.layers_of})`;
  }

  function renderCounters(c) {
    const k = c.counters;
    const items = [
      ['governor_runs', 'governor runs'], ['governor_raises', 'caps raised'], ['evicted', 'slots evicted'],
      ['demoted', 'slots demoted'], ['merged', 'slots merged'], ['preemptions', 'preemptions'],
      ['prefix_hits', 'prefix hits'], ['prefix_lookups', 'prefix lookups'], ['prefix_tokens', 'tokens reused'],
    ];
    const dl = $('counters');
    if (!dl.children.length) {
      for (const [id, label] of items) dl.append(el('div', { id: 'ctr-' + id }, el('dt', { text: label }), el('dd', { text: '0' })));
    }
    for (const [id] of items) {
      const box = $('ctr-' + id);
      box.querySelector('dd').textContent = fmtCount(k[id]);
      box.dataset.value = k[id];
      if (lastCounters[id] !== undefined && lastCounters[id] !== k[id]) {
        box.classList.remove('bump');
        void box.offsetWidth; // restart the animation
        box.classList.add('bump');
      }
      lastCounters[id] = k[id];
    }
  }

  function renderEvents(c) {
    const ol = $('events');
    const newest = c.events.length ? c.events[c.events.length - 1].id : 0;
    if (newest < lastEventId) { seenEvents.clear(); ol.replaceChildren(); } // a restarted server
    lastEventId = newest;
    for (const e of c.events) {
      if (seenEvents.has(e.id)) continue;
      seenEvents.add(e.id);
      ol.prepend(el('li', { 'data-kind': e.kind, 'data-id': e.id },
        el('span', { class: 't', text: '+' + e.t.toFixed(1) + 's' }), el('span', { class: 'k', text: e.kind }), e.text));
    }
    while (ol.children.length > 100) ol.lastChild.remove();
  }

  function render(c) {
    $('model').textContent = c.model;
    $('policy').textContent = c.policy;
    $('kvmem').textContent = c.budget.kv_mem ? fmtBytes(c.budget.kv_mem) : 'unlimited';
    $('live').textContent = `${c.live} live, ${c.queued} queued (max ${c.max_seqs})`;
    $('snap').textContent = `snapshot at +${c.snapshot.toFixed(1)} s · ${c.n_layer} layers`;
    renderGauge(c);
    renderSeqs(c);
    renderLayers(c);
    renderCounters(c);
    renderEvents(c);
    document.body.dataset.polls = String((parseInt(document.body.dataset.polls || '0', 10) || 0) + 1);
  }

  async function poll() {
    pollTimer = 0;
    if (polling || needKey) return;
    polling = true;
    try {
      const r = await fetch('/v1/cache', { headers: headers(false), cache: 'no-store' });
      if (r.status === 401) askKey('API key needed');
      else if (!r.ok) setConn('error', errorText(r.status, await r.text()));
      else { render(await r.json()); setConn('live', 'live'); }
    } catch (e) {
      setConn('error', 'server unreachable');
    }
    polling = false;
    schedulePoll(busy ? POLL_BUSY_MS : POLL_MS);
  }
  function schedulePoll(ms) {
    if (needKey) return;
    if (pollTimer) clearTimeout(pollTimer);
    pollTimer = setTimeout(poll, document.hidden && ms > 0 ? 4 * ms : ms);
  }

  // ---- start-up ----------------------------------------------------------------------------------
  function init() {
    const m = /(?:^#|&)key=([^&]*)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem('tierkv-key', decodeURIComponent(m[1]));
      window.history.replaceState(null, '', location.pathname + location.search);
    }
    key = sessionStorage.getItem('tierkv-key') || '';
    $('keyform').addEventListener('submit', (e) => {
      e.preventDefault();
      key = $('key').value.trim();
      sessionStorage.setItem('tierkv-key', key);
      $('keyform').hidden = true;
      needKey = false;
      setConn('connecting', 'connecting');
      schedulePoll(0);
    });
    $('send-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const t = $('prompt').value;
      if (!busy && t.trim()) { $('prompt').value = ''; send(t); }
    });
    $('prompt').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); $('send-form').requestSubmit(); }
    });
    $('stop').addEventListener('click', stop);
    $('clear').addEventListener('click', () => { if (!busy) { convo = []; $('messages').replaceChildren(); } });
    document.addEventListener('visibilitychange', () => schedulePoll(0));
    schedulePoll(0);
  }

  // ---- self-test (the browser test runs it; anyone may: tierkv.selfTest() in the console) ---------
  function selfTest() {
    const fails = [];
    let n = 0;
    const check = (ok, what) => { n++; if (!ok) fails.push(what); };
    const stream = 'data: {"a":1}\n\n: comment\ndata: {"b":"x\u00e9\u4e16"}\r\n\r\ndata:line1\ndata: line2\n\n' +
      'event: ping\ndata: [DONE]\n\n';
    const want = ['{"a":1}', '{"b":"x\u00e9\u4e16"}', 'line1\nline2', '[DONE]'];
    const run = (pieces) => {
      const got = [];
      const p = sseParser((d) => got.push(d));
      for (const s of pieces) p.feed(s);
      p.end();
      return got;
    };
    // every split into two pieces, then one character at a time
    for (let i = 0; i <= stream.length; i++) {
      const got = run([stream.slice(0, i), stream.slice(i)]);
      check(JSON.stringify(got) === JSON.stringify(want), `sse split at ${i}: ${JSON.stringify(got)}`);
    }
    check(JSON.stringify(run(Array.from(stream))) === JSON.stringify(want), 'sse one character at a time');
    check(JSON.stringify(run(['data: x'])) === '["x"]', 'sse: an event without its blank line is ended by end()');
    check(JSON.stringify(run(['\n\n\n'])) === '[]', 'sse: blank lines alone are no events');
    check(fmtBytes(0) === '0 B' && fmtBytes(1023) === '1023 B' && fmtBytes(1024) === '1.00 KiB' &&
      fmtBytes(105 * 1024) === '105.0 KiB' && fmtBytes(3 * 1048576) === '3.00 MiB', 'fmtBytes');
    check(errorText(401, '{"error":{"message":"bad key"}}') === '401: bad key' && errorText(502, '<html>') === 'HTTP 502',
      'errorText');
    return { ok: fails.length === 0, checks: n, failures: fails };
  }

  return { init, selfTest, sseParser, fmtBytes };
})();

tierkv.init();
