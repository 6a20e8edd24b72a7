// agentrun run stream page: a namespace's runs, and one run's live timeline.
// Plain script, no framework. Test hooks are DOM attributes only: data-block
// on each block, data-phase on the run header, data-last-seq and
// data-finished on the timeline.
'use strict';
(() => {
  const API = '/apis/stream.agentrun.dev/v1/namespaces/';
  const TOKEN_KEY = 'agentrun.token';
  const RECONNECT = 'agentrun.dev/reconnect';
  const $ = (sel) => document.querySelector(sel);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  // --- auth: a bearer token from #token=..., kept in sessionStorage --------

  function takeToken() {
    const t = new URLSearchParams(location.hash.slice(1)).get('token');
    if (t) {
      sessionStorage.setItem(TOKEN_KEY, t);
      history.replaceState(null, '', location.pathname + location.search);
    }
    return sessionStorage.getItem(TOKEN_KEY) || '';
  }
  const token = takeToken();

  function headers(extra) {
    const h = Object.assign({}, extra);
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  }

  // The message of a Kubernetes Status body, or the HTTP status.
  async function statusMessage(resp) {
    try {
      const st = await resp.json();
      if (st && st.message) return st.message;
    } catch (e) { /* not JSON */ }
    return 'HTTP ' + resp.status + ' ' + resp.statusText;
  }

  function showError(msg) {
    const e = $('#error');
    e.textContent = msg || '';
    e.hidden = !msg;
  }

  // --- runs view -----------------------------------------------------------

  const count = (c) => (c && c.used || 0) + ' / ' + (c && c.granted ? c.granted : '–');
  const runHref = (ns, name) => '?namespace=' + encodeURIComponent(ns) + '&run=' + encodeURIComponent(name);

  async function pollRuns(ns) {
    try {
      const resp = await fetch(API + encodeURIComponent(ns) + '/researchruns', { headers: headers(), cache: 'no-store' });
      if (resp.ok) {
        const list = await resp.json();
        showError('');
        renderRuns(ns, list.items || []);
      } else {
        showError(await statusMessage(resp));
        renderRuns(ns, null);
      }
    } catch (e) {
      showError('cannot reach the server: ' + e.message);
    }
    setTimeout(() => pollRuns(ns), 2000);
  }

  function renderRuns(ns, items) {
    $('#runs').hidden = items === null;
    $('#runs-empty').hidden = !(items && items.length === 0);
    $('#runs tbody').replaceChildren(...(items || []).map((r) => runRow(ns, r)));
  }

  function runRow(ns, r) {
    const tr = el('tr');
    tr.dataset.run = r.name;
    const link = el('a', '', r.name);
    link.href = runHref(ns, r.name);
    const b = r.budget || {};
    const cells = [link, r.phase, r.reason, count(b.modelRequests), count(b.toolCalls), count(b.tokens),
      r.steps || 0, (r.pendingApprovals || []).length];
    for (const c of cells) {
      const td = el('td');
      if (c instanceof Node) td.append(c); else td.textContent = c === undefined || c === null ? '' : String(c);
      tr.append(td);
    }
    tr.cells[1].className = 'phase';
    tr.cells[1].dataset.phase = r.phase || '';
    tr.addEventListener('click', () => { location.href = link.href; });
    return tr;
  }

  // --- run view: state ------------------------------------------------------

  const R = {
    ns: '', name: '', lastSeq: 0, snapSeq: 0, lastId: null, state: {}, finished: false,
    blocks: new Map(), pending: new Map(), abort: null, backoff: 250,
  };
  const timeline = () => $('#timeline');

  // applyPatch applies an RFC 6902 patch's add, replace and remove ops.
  function applyPatch(doc, ops) {
    for (const op of ops || []) {
      const keys = op.path.split('/').slice(1).map((k) => k.replace(/~1/g, '/').replace(/~0/g, '~'));
      if (keys.length === 0) { doc = op.op === 'remove' ? {} : op.value; continue; }
      let parent = doc;
      for (const k of keys.slice(0, -1)) {
        if (parent[k] === undefined || parent[k] === null) parent[k] = {};
        parent = parent[k];
      }
      const last = keys[keys.length - 1];
      if (Array.isArray(parent)) {
        const i = last === '-' ? parent.length : Number(last);
        if (op.op === 'add') parent.splice(i, 0, op.value);
        else if (op.op === 'replace') parent[i] = op.value;
        else if (op.op === 'remove') parent.splice(i, 1);
      } else if (op.op === 'add' || op.op === 'replace') {
        parent[last] = op.value;
      } else if (op.op === 'remove') {
        delete parent[last];
      }
    }
    return doc;
  }

  function renderHeader() {
    const st = R.state || {};
    $('#run-header').dataset.phase = st.phase || '';
    $('#run-phase').textContent = st.phase || 'Unknown';
    $('#run-reason').textContent = st.reason || '';
    $('#run-message').textContent = st.message || '';
  }

  // Pending approvals come from the state (pendingApprovals) and from the
  // approval-requested / approval-decided CUSTOM events.
  function syncPending() {
    if (!Array.isArray(R.state.pendingApprovals)) return;
    R.pending.clear();
    for (const a of R.state.pendingApprovals) {
      const id = a.actionID || a.action;
      if (id) R.pending.set(id, pendingOf(id, a));
    }
    renderApprovals();
  }

  // pendingOf is what an approver reads of a waiting call: its full
  // redacted arguments and their hash, which an approval of arguments too
  // long to be shown must name.
  const pendingOf = (id, a) => ({
    action: id, tool: a.tool, summary: a.summary, arguments: a.arguments,
    bytes: a.argumentsBytes, sha256: a.argumentsSHA256, truncated: !!a.argumentsTruncated,
  });

  const shellArg = (s) => (/^[A-Za-z0-9._\-/]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'");

  function approveCommand(action, decision, sha256) {
    const value = { actionID: action, decision };
    if (sha256) value.argumentsSHA256 = sha256;
    const patch = JSON.stringify([{ op: 'add', path: '/spec/approvals/-', value }]);
    return 'kubectl patch researchrun ' + shellArg(R.name) + ' -n ' + shellArg(R.ns) +
      ' --type=json -p ' + shellArg(patch);
  }

  function renderApprovals() {
    const items = [...R.pending.values()].map((a) => {
      const li = el('li');
      li.dataset.action = a.action;
      li.append(el('div', '', (a.tool || 'tool') + ' — action ' + a.action));
      if (a.arguments !== undefined || a.sha256) {
        li.append(el('pre', 'args', a.arguments || ''));
        li.append(el('div', 'args-note', a.truncated
          ? 'TRUNCATED: showing ' + (a.arguments || '').length + ' of ' + a.bytes + ' bytes; the full arguments\' SHA-256 is ' +
            a.sha256 + '. Approve only after reading them in full where they were made: the command names that hash.'
          : 'Arguments in full (redacted), ' + a.bytes + ' bytes, SHA-256 ' + a.sha256 + '.'));
      } else if (a.summary) {
        li.append(el('div', 'args-note', 'Summary (redacted, possibly cut): ' + a.summary));
      }
      const cmd = approveCommand(a.action, 'Approve', a.truncated ? a.sha256 : '');
      const copy = el('button', 'copy', 'Copy');
      copy.type = 'button';
      copy.addEventListener('click', () => navigator.clipboard && navigator.clipboard.writeText(cmd));
      li.append(el('code', 'cmd', cmd), copy, el('div', 'hint', 'To refuse it, use "decision":"Deny".'));
      return li;
    });
    $('#approvals ul').replaceChildren(...items);
    $('#approvals').hidden = items.length === 0;
  }

  // --- run view: timeline -------------------------------------------------

  // block returns the one element of a text, reasoning or tool-call block.
  function block(id, kind, label) {
    let b = R.blocks.get(id);
    if (!b) {
      b = el('div', 'block ' + kind);
      b.dataset.block = id;
      b.append(el('div', 'label', label || kind));
      if (kind === 'tool') b.append(el('pre', 'args'), el('pre', 'result'));
      else b.append(el('div', 'body'));
      R.blocks.set(id, b);
      timeline().append(b);
    }
    if (label) b.querySelector('.label').textContent = label;
    return b;
  }

  function append(b, sel, text) { b.querySelector(sel).append(text || ''); }

  function note(kind, text) { timeline().append(el('div', 'note ' + kind, text)); }

  function custom(ev) {
    const v = ev.value;
    const e = el('div', 'custom');
    e.dataset.name = ev.name;
    e.append(el('span', 'name', ev.name), ' ', el('code', 'value', JSON.stringify(v)));
    timeline().append(e);
    const id = v && (v.actionID || v.actionId || v.action);
    if (!id) return;
    if (/approval-requested$/.test(ev.name)) R.pending.set(id, pendingOf(id, v));
    else if (/approval-decided$/.test(ev.name)) R.pending.delete(id);
    renderApprovals();
  }

  function finish(ev, how) {
    const st = R.state || {};
    const outcome = ev.outcome && ev.outcome.type ? ' (' + ev.outcome.type + ')' : '';
    const e = el('div', 'final ' + how);
    e.append(el('strong', '', (how === 'error' ? 'Run error' : 'Run finished') + outcome));
    const reason = st.reason || ev.code;
    const message = how === 'error' ? ev.message : st.message;
    if (reason) e.append(el('div', 'reason', reason));
    if (message) e.append(el('div', 'message', message));
    timeline().append(e);
    R.finished = true;
    timeline().dataset.finished = 'true';
  }

  const handlers = {
    RUN_STARTED: (ev) => note('run', 'Run started' + (ev.runId ? ' (' + ev.runId + ')' : '')),
    STEP_STARTED: (ev) => note('step', ev.stepName),
    TEXT_MESSAGE_START: (ev) => block(ev.messageId, 'text', ev.role || 'assistant'),
    TEXT_MESSAGE_CONTENT: (ev) => append(block(ev.messageId, 'text'), '.body', ev.delta),
    TEXT_MESSAGE_END: (ev) => block(ev.messageId, 'text').classList.add('done'),
    REASONING_MESSAGE_START: (ev) => block(ev.messageId, 'reasoning', 'reasoning'),
    REASONING_MESSAGE_CONTENT: (ev) => append(block(ev.messageId, 'reasoning'), '.body', ev.delta),
    REASONING_MESSAGE_END: (ev) => block(ev.messageId, 'reasoning').classList.add('done'),
    TOOL_CALL_START: (ev) => block(ev.toolCallId, 'tool', ev.toolCallName),
    TOOL_CALL_ARGS: (ev) => append(block(ev.toolCallId, 'tool'), '.args', ev.delta),
    TOOL_CALL_END: (ev) => block(ev.toolCallId, 'tool').classList.add('done'),
    TOOL_CALL_RESULT: (ev) => {
      const c = typeof ev.content === 'string' ? ev.content : JSON.stringify(ev.content);
      block(ev.toolCallId, 'tool').querySelector('.result').textContent = c;
    },
    STATE_DELTA: (ev) => {
      R.state = applyPatch(R.state, ev.delta);
      renderHeader();
      syncPending();
    },
    CUSTOM: custom,
    RUN_FINISHED: (ev) => finish(ev, 'finished'),
    RUN_ERROR: (ev) => finish(ev, 'error'),
  };

  // apply renders one stored event once: an event whose seq is not past the
  // last applied one (a replay after a reconnect) is ignored. A STATE_DELTA
  // the snapshot already includes only advances the seq.
  function apply(ev) {
    if (ev.seq && ev.seq <= R.lastSeq) return;
    const stale = ev.type === 'STATE_DELTA' && ev.seq <= R.snapSeq;
    const fn = handlers[ev.type];
    if (fn && !stale) fn(ev);
    if (ev.seq) {
      R.lastSeq = ev.seq;
      timeline().dataset.lastSeq = String(R.lastSeq);
    }
  }

  // A new subscriber's stream starts with a snapshot at seq n and goes on
  // after n; the blocks up to n come from the JSON-lines export.
  async function onSnapshot(ev, n) {
    R.state = ev.snapshot && typeof ev.snapshot === 'object' ? ev.snapshot : {};
    R.snapSeq = n;
    renderHeader();
    syncPending();
    if (R.lastSeq < n) await loadHistory(n);
  }

  async function loadHistory(n) {
    try {
      const resp = await fetch(eventsURL('?format=jsonl'), { headers: headers(), cache: 'no-store' });
      if (!resp.ok) throw new Error(await statusMessage(resp));
      for (const line of (await resp.text()).split('\n')) {
        let ev;
        try { ev = JSON.parse(line); } catch (e) { continue; }
        if (!ev || !ev.type || !ev.seq) continue;
        if (ev.seq > n) break;
        apply(ev);
      }
    } catch (e) {
      showError('the run history is unavailable: ' + e.message);
    }
    R.lastSeq = Math.max(R.lastSeq, n);
    timeline().dataset.lastSeq = String(R.lastSeq);
  }

  async function onMessage(id, data) {
    let ev;
    try { ev = JSON.parse(data); } catch (e) { return; }
    if (id) R.lastId = id;
    if (ev.type === 'STATE_SNAPSHOT') return onSnapshot(ev, Number(id) || 0);
    if (ev.type === 'CUSTOM' && ev.name === RECONNECT) { R.abort.abort(); return; }
    apply(ev);
    R.backoff = 250;
  }

  // --- run view: the SSE stream, read with fetch() -------------------------

  function eventsURL(query) {
    return API + encodeURIComponent(R.ns) + '/researchruns/' + encodeURIComponent(R.name) + '/events' + (query || '');
  }

  // readSSE parses text/event-stream lines and calls onMessage(id, data)
  // for each message; comments are skipped.
  async function readSSE(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let msg = { id: '', data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      const lines = (buf + value).split('\n');
      buf = lines.pop();
      for (let line of lines) {
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (msg.data.length) await onMessage(msg.id, msg.data.join('\n'));
          msg = { id: '', data: [] };
          continue;
        }
        if (line[0] === ':') continue;
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        const v = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
        if (field === 'data') msg.data.push(v);
        else if (field === 'id') msg.id = v;
      }
    }
  }

  function setConn(text) { $('#conn').textContent = text; }

  async function connect() {
    R.abort = new AbortController();
    const extra = R.lastId !== null ? { 'Last-Event-ID': R.lastId } : {};
    let resp;
    try {
      resp = await fetch(eventsURL(), { headers: headers(extra), signal: R.abort.signal, cache: 'no-store' });
    } catch (e) {
      return retry('cannot connect');
    }
    if (resp.status === 410) return fresh();
    if (!resp.ok) {
      const msg = await statusMessage(resp);
      if (resp.status >= 500) return retry(msg);
      showError(msg);
      setConn('');
      return;
    }
    showError('');
    setConn('live');
    try { await readSSE(resp.body); } catch (e) { /* aborted, or the network ended */ }
    retry('reconnecting');
  }

  function retry(why) {
    setConn(why + ' …');
    setTimeout(connect, R.backoff);
    R.backoff = Math.min(R.backoff * 2, 5000);
  }

  // fresh starts the run view over: a 410 means Last-Event-ID can no longer
  // resume, so a new snapshot and history replace everything.
  function fresh() {
    Object.assign(R, { lastSeq: 0, snapSeq: 0, lastId: null, state: {}, finished: false });
    R.blocks.clear();
    R.pending.clear();
    timeline().replaceChildren();
    delete timeline().dataset.finished;
    timeline().dataset.lastSeq = '0';
    renderHeader();
    renderApprovals();
    connect();
  }

  function startRun(ns, name) {
    Object.assign(R, { ns, name });
    document.title = name + ' — agentrun';
    $('#run-name').textContent = ns + '/' + name;
    $('#back').href = '?namespace=' + encodeURIComponent(ns);
    $('#run-view').hidden = false;
    renderHeader();
    connect();
  }

  function main() {
    const q = new URLSearchParams(location.search);
    const ns = q.get('namespace') || 'default';
    $('#ns').value = ns;
    $('#home').href = '?namespace=' + encodeURIComponent(ns);
    $('#ns-form').addEventListener('submit', (e) => {
      e.preventDefault();
      location.search = '?namespace=' + encodeURIComponent($('#ns').value.trim() || 'default');
    });
    if (q.get('run')) {
      startRun(ns, q.get('run'));
    } else {
      $('#runs-view').hidden = false;
      pollRuns(ns);
    }
  }

  main();
})();
