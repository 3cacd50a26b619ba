// The task viewer: a dependency-free single page over the public REST API. The API key lives in
// sessionStorage (gone when the tab closes) and goes in the Authorization header of every call, so the
// page sees exactly what the key's holder sees through the API. Screenshots are fetched with the key and
// shown as blob: URLs; live updates come from GET /v1/tasks/{id}/events read through fetch (EventSource
// cannot send a header). All DOM text goes through textContent: nothing from the API becomes markup.
'use strict';
(() => {
  const KEY = 'ufo.apiKey';
  const main = document.getElementById('main');
  const TERMINAL = new Set(['finished', 'failed', 'cancelled']);
  const STATUSES = ['queued', 'running', 'waiting', 'finished', 'failed', 'cancelled'];
  let page = null; // AbortController of the page on screen: its timers and streams stop with it
  let config = { jaeger_url: null, trace_service: 'ufo-agent', executors: [] };
  const blobs = new Map(); // screenshot path -> blob: URL, for this sign-in

  // --- small helpers -------------------------------------------------------------------------------
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.className = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  const svg = (tag, attrs) => {
    const el = document.createElementNS('http' + '://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    return el;
  };
  const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
  const key = () => sessionStorage.getItem(KEY);
  const money = (x) => '$' + (x || 0).toFixed(4);
  function age(iso) {
    const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (!isFinite(s)) return '';
    if (s < 60) return Math.round(s) + ' s ago';
    if (s < 3600) return Math.round(s / 60) + ' min ago';
    if (s < 86400) return Math.round(s / 3600) + ' h ago';
    return Math.round(s / 86400) + ' d ago';
  }
  const badge = (status) => h('span', { class: 'status ' + status, 'data-status': status }, status);
  // Why a queued or waiting task is not being worked on: the API's `waiting_for` (a closed set of reasons).
  const WAIT_WORDS = {
    runner_slot: 'waiting for a runner slot',
    desktop: 'waiting for a free desktop',
    question: 'waiting for a person to answer',
    approval: 'waiting for a person to approve or reject an action',
  };
  const waitingText = (w) => !w ? '' : (WAIT_WORDS[w.reason] || 'waiting for ' + w.reason) +
    ((w.reason === 'runner_slot' || w.reason === 'desktop') && w.place ? ` (place ${w.place} in the queue)` : '');
  const waitingFor = (w) => w ? h('span', { class: 'muted waiting-for', 'data-reason': w.reason }, waitingText(w)) : null;

  class ApiError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }
  async function api(path, { method = 'GET', body, signal } = {}) {
    const headers = { Authorization: 'Bearer ' + key() };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal });
    const text = await r.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = null; }
    if (r.status === 401) { signOut(`The API key was refused (${data?.code || 401}: ${data?.message || ''}).`); }
    if (!r.ok) throw new ApiError(r.status, data?.code || 'error', data?.message || ('HTTP ' + r.status));
    return data;
  }
  async function image(path) {
    if (blobs.has(path)) return blobs.get(path);
    const r = await fetch(path, { headers: { Authorization: 'Bearer ' + key() } });
    if (!r.ok) throw new ApiError(r.status, 'error', 'screenshot: HTTP ' + r.status);
    const url = URL.createObjectURL(await r.blob());
    blobs.set(path, url);
    return url;
  }
  function flash(where, error) {
    where.replaceChildren(h('span', { class: 'error' }, error.code ? `${error.code}: ${error.message}` : String(error)));
  }

  // Reads one server-sent event response; true when it ended with `end` or `error`.
  async function readSse(r, onEvent) {
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '', name = 'message', data = [], seq = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return false;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (line === '') {
          if (data.length) {
            await onEvent(name, JSON.parse(data.join('\n')), seq);
            if (name === 'end' || name === 'error') return true;
          }
          name = 'message'; data = []; seq = null;
        } else if (line.startsWith(':')) { /* keep-alive */ }
        else {
          const i = line.indexOf(':');
          const field = i < 0 ? line : line.slice(0, i);
          const val = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
          if (field === 'event') name = val;
          else if (field === 'data') data.push(val);
          else if (field === 'id') seq = Number(val);
        }
      }
    }
  }

  // Server-sent events over fetch: resumes with Last-Event-ID after a dropped connection, stops at `end`.
  async function events(id, fromSeq, onEvent, signal) {
    let last = fromSeq - 1;
    while (!signal.aborted) {
      try {
        const headers = { Authorization: 'Bearer ' + key(), Accept: 'text/event-stream' };
        if (last > 0) headers['Last-Event-ID'] = String(last);
        const r = await fetch(`/v1/tasks/${id}/events`, { headers, signal });
        if (r.status === 401 || r.status === 404) return;
        if (!r.ok) throw new Error('HTTP ' + r.status);
        if (await readSse(r, async (name, payload, seq) => { if (seq !== null) last = seq; await onEvent(name, payload); })) return;
      } catch (e) {
        if (signal.aborted) return;
      }
      await sleep(1000, signal);
    }
  }

  // --- routing -------------------------------------------------------------------------------------
  function signOut(message) {
    sessionStorage.removeItem(KEY);
    for (const url of blobs.values()) URL.revokeObjectURL(url);
    blobs.clear();
    // replaceState: no hashchange, whose route() would drop the message.
    history.replaceState(null, '', '#/');
    route(message);
  }
  async function route(message) {
    page?.abort();
    page = new AbortController();
    const signal = page.signal;
    document.getElementById('signout').hidden = !key();
    if (!key()) return signInPage(message);
    const m = location.hash.match(/^#\/task\/([0-9a-fA-F-]{36})(\/replay)?$/);
    try {
      if (m && m[2]) await replayPage(m[1], signal);
      else if (m) await taskPage(m[1], signal);
      else await listPage(signal);
    } catch (e) {
      if (!signal.aborted) main.replaceChildren(h('section', {}, h('p', { class: 'error', id: 'page-error' }, `${e.code || 'error'}: ${e.message}`), h('a', { href: '#/' }, 'All tasks')));
    }
  }
  window.addEventListener('hashchange', () => route());
  document.getElementById('signout').addEventListener('click', () => signOut());

  function signInPage(message) {
    const input = h('input', { type: 'password', id: 'api-key', autocomplete: 'off', placeholder: 'API key', size: 40 });
    const out = h('p', { class: 'error', id: 'signin-error' }, message || '');
    const form = h('form', { id: 'signin' }, h('h1', {}, 'Sign in'),
      h('p', { class: 'muted' }, 'The key is kept in this tab only (sessionStorage) and sent as a bearer token.'),
      h('div', { class: 'row' }, input, h('button', { type: 'submit' }, 'Sign in')), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(KEY, input.value.trim());
      try {
        config = await api('/ui/config.json');
        route();
      } catch (e) {
        // A refused key has already re-rendered this form with the reason (signOut).
        if (key()) { sessionStorage.removeItem(KEY); flash(out, e); }
      }
    });
    main.replaceChildren(h('section', {}, form));
    input.focus();
  }

  // --- the task list and the submit form --------------------------------------------------------------
  async function listPage(signal) {
    if (!config.loaded) { config = { ...(await api('/ui/config.json', { signal })), loaded: true }; }
    const filter = h('select', { id: 'filter' }, h('option', { value: '' }, 'all'), STATUSES.map((s) => h('option', { value: s }, s)));
    const body = h('tbody', { id: 'tasks' });
    const note = h('p', { class: 'muted', id: 'list-note' });
    main.replaceChildren(submitForm(), h('section', {},
      h('div', { class: 'row' }, h('h1', {}, 'Tasks'), h('label', {}, 'status ', filter)),
      h('table', {}, h('thead', {}, h('tr', {}, ['status', 'request', 'age', 'steps', 'cost', 'result'].map((c) => h('th', {}, c)))), body), note));
    const load = async () => {
      const q = filter.value ? '&status=' + filter.value : '';
      const pageOf = await api('/v1/tasks?page_size=100' + q, { signal });
      body.replaceChildren(...pageOf.tasks.map((t) => h('tr', { 'data-id': t.id },
        h('td', { title: waitingText(t.waiting_for) }, badge(t.status), t.waiting_for ? ' ' : null, waitingFor(t.waiting_for)),
        h('td', {}, h('a', { href: '#/task/' + t.id }, t.request)),
        h('td', { title: t.created_at }, age(t.created_at)),
        h('td', {}, t.totals.steps), h('td', {}, money(t.totals.cost)),
        h('td', {}, t.result))));
      note.textContent = pageOf.tasks.length ? '' : 'No tasks' + (filter.value ? ' with this status.' : ' yet.');
    };
    filter.addEventListener('change', () => load().catch((e) => flash(note, e)));
    // No event stream spans tasks: the list polls, so new tasks appear without a reload.
    while (!signal.aborted) {
      try { await load(); } catch (e) { if (!signal.aborted) flash(note, e); }
      await sleep(2000, signal);
    }
  }

  function submitForm() {
    const request = h('textarea', { id: 'request', required: true, placeholder: 'What should the agent do?' });
    const num = (id, label, step) => h('label', {}, label + ' ', h('input', { type: 'number', id, min: 0, step, size: 6 }));
    const policy = h('select', { id: 'confirm-policy' }, h('option', { value: '' }, 'default'),
      ['sensitive', 'always', 'never'].map((p) => h('option', { value: p }, p)));
    const executor = h('select', { id: 'executor' }, h('option', { value: '' }, '(server default)'),
      config.executors.map((e) => h('option', { value: e }, e)));
    const out = h('p', { id: 'submit-error', class: 'error' });
    const form = h('form', { id: 'submit' }, h('h2', {}, 'New task'), request,
      h('div', { class: 'row' }, num('max-steps', 'max steps', 1), num('max-cost', 'max cost ($)', 0.01),
        num('timeout', 'timeout (s)', 1), h('label', {}, 'confirm ', policy), h('label', {}, 'executor ', executor),
        h('button', { type: 'submit' }, 'Submit')), out);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const body = { request: request.value };
      const limits = {};
      const v = (id) => form.querySelector('#' + id).value;
      if (v('max-steps')) limits.max_steps = Number(v('max-steps'));
      if (v('max-cost')) limits.max_cost = Number(v('max-cost'));
      if (v('timeout')) limits.timeout_seconds = Number(v('timeout'));
      if (Object.keys(limits).length) body.limits = limits;
      if (policy.value) body.confirm_policy = policy.value;
      if (executor.value) body.executor = executor.value;
      try {
        const task = await api('/v1/tasks', { method: 'POST', body });
        location.hash = '#/task/' + task.id;
      } catch (e) { flash(out, e); }
    });
    return h('section', {}, form);
  }

  // --- one task: header, what it waits for, the live timeline ------------------------------------------
  async function allSteps(id, signal) {
    const steps = [];
    for (;;) {
      const got = (await api(`/v1/tasks/${id}/steps?from=${steps.length + 1}&limit=100`, { signal })).steps;
      steps.push(...got);
      if (got.length < 100) return steps;
    }
  }

  async function taskPage(id, signal) {
    let task = await api('/v1/tasks/' + id, { signal });
    const head = h('section', { id: 'task-head' });
    const waits = h('div', { id: 'waits' });
    const timeline = h('div', { id: 'timeline' });
    const cards = new Map();
    const live = TERMINAL.has(task.status) ? null : livePanel(id, signal);
    main.replaceChildren(head, waits, ...(live ? [live.el] : []), h('h2', {}, 'Timeline'), timeline);

    const showStep = (step) => {
      const card = stepCard(id, step);
      const old = cards.get(step.step);
      if (old) old.replaceWith(card);
      else {
        const after = [...cards.keys()].filter((n) => n > step.step).sort((a, b) => a - b)[0];
        if (after !== undefined) cards.get(after).before(card); else timeline.append(card);
      }
      cards.set(step.step, card);
    };
    let refreshing = null;
    const refresh = async () => {
      task = await api('/v1/tasks/' + id, { signal });
      renderHead(head, task, reopen);
      renderWaits(waits, task, refresh);
    };
    const queueRefresh = () => { refreshing ??= refresh().catch(() => {}).finally(() => { refreshing = null; }); return refreshing; };
    let streaming = false;
    const follow = async (from) => {
      streaming = true;
      await events(id, from, async (name, ev) => {
        if (name === 'step_finished' && ev.step) {
          const got = await api(`/v1/tasks/${id}/steps?from=${ev.step}&limit=1`, { signal });
          got.steps.forEach(showStep);
        }
        // An ended task keeps the desktop after its last step with that step: show it.
        if ((name === 'task_finished' || name === 'task_failed') && cards.size) {
          const got = await api(`/v1/tasks/${id}/steps?from=${Math.max(...cards.keys())}&limit=1`, { signal });
          got.steps.forEach(showStep);
        }
        live?.event(name, ev);
        if (name === 'end' || !['step_started', 'phase_timing', 'person_input'].includes(name)) await queueRefresh();
      }, signal);
      streaming = false;
    };
    // A follow-up reopens a finished task: start following again from what was last seen.
    const reopen = () => { if (!streaming) follow(task.last_seq + 1); queueRefresh(); };
    renderHead(head, task, reopen);
    renderWaits(waits, task, refresh);
    const from = task.last_seq + 1;
    (await allSteps(id, signal)).forEach(showStep);
    await follow(from);
  }

  // The desktop live (GET /v1/tasks/{id}/live: a frame only when the screen changed), what the agents are
  // doing now, and the takeover: while a person has the desktop, a click on the picture and the keys typed
  // with the picture focused go to the desktop (POST /v1/tasks/{id}/input), recorded as the person's steps.
  const KEYS = { Enter: '{ENTER}', Backspace: '{BACKSPACE}', Tab: '{TAB}', Escape: '{ESC}', Delete: '{DELETE}',
    ArrowLeft: '{LEFT}', ArrowRight: '{RIGHT}', ArrowUp: '{UP}', ArrowDown: '{DOWN}', Home: '{HOME}', End: '{END}',
    PageUp: '{PGUP}', PageDown: '{PGDN}' };
  function livePanel(id, signal) {
    const img = h('img', { id: 'live-picture', alt: 'the desktop, live', tabindex: 0 });
    const phase = h('span', { id: 'live-phase', class: 'muted' }, 'connecting to the desktop…');
    const stats = h('span', { id: 'live-stats', class: 'muted' });
    const out = h('p', { class: 'error', id: 'live-error' });
    let taken = false, frame = null, sending = Promise.resolve();
    const take = h('button', { id: 'takeover', class: 'secondary' }, 'Take over');
    const back = h('button', { id: 'handback', class: 'secondary' }, 'Hand back');
    const typed = h('input', { type: 'text', id: 'live-text', size: 30, placeholder: 'text to type on the desktop' });
    const typeForm = h('form', { class: 'row', id: 'live-type' }, typed, h('button', { type: 'submit', class: 'secondary' }, 'Type'));
    const show = () => {
      take.disabled = taken; back.disabled = !taken; typed.disabled = !taken;
      img.classList.toggle('taken', taken);
      img.title = taken ? 'your clicks and keys go to the desktop' : 'Take over to use the desktop';
    };
    const send = (input) => {
      // In order, one at a time: the runner delivers them in the order they were written.
      sending = sending.then(() => api(`/v1/tasks/${id}/input`, { method: 'POST', body: input })).catch((e) => flash(out, e));
      return sending;
    };
    take.onclick = async () => {
      try { await api(`/v1/tasks/${id}/takeover`, { method: 'POST' }); taken = true; out.replaceChildren(); phase.textContent = 'you have the desktop: the agents pause at the next step'; show(); img.focus(); }
      catch (e) { if (e.code === 'failed_precondition' && /already/.test(e.message)) { taken = true; show(); } else flash(out, e); }
    };
    back.onclick = async () => {
      try { await sending; await api(`/v1/tasks/${id}/handback`, { method: 'POST' }); taken = false; out.replaceChildren(); show(); }
      catch (e) { if (e.code === 'failed_precondition' && /nobody/.test(e.message)) { taken = false; show(); } else flash(out, e); }
    };
    img.addEventListener('click', (ev) => {
      if (!taken || !frame) return;
      const r = img.getBoundingClientRect();
      const x = frame.origin_x + Math.floor((ev.clientX - r.left) * frame.width / r.width);
      const y = frame.origin_y + Math.floor((ev.clientY - r.top) * frame.height / r.height);
      img.focus();
      send({ click: { x, y } });
    });
    img.addEventListener('keydown', (ev) => {
      if (!taken) return;
      let input = null;
      if (KEYS[ev.key]) input = { keys: (ev.ctrlKey ? '^' : '') + (ev.altKey ? '%' : '') + (ev.shiftKey ? '+' : '') + KEYS[ev.key] };
      else if (ev.key.length === 1 && (ev.ctrlKey || ev.altKey)) input = { keys: (ev.ctrlKey ? '^' : '') + (ev.altKey ? '%' : '') + ev.key.toLowerCase() };
      else if (ev.key.length === 1) input = { text: ev.key };
      if (!input) return;
      ev.preventDefault();
      send(input);
    });
    typeForm.addEventListener('submit', (ev) => {
      ev.preventDefault();
      if (!taken || !typed.value) return;
      send({ text: typed.value }); typed.value = '';
    });
    show();
    let frames = 0, bytes = 0;
    (async () => {
      while (!signal.aborted) {
        try {
          const r = await fetch(`/v1/tasks/${id}/live`, { headers: { Authorization: 'Bearer ' + key(), Accept: 'text/event-stream' }, signal });
          if (!r.ok) { flash(out, new ApiError(r.status, 'error', 'live view: HTTP ' + r.status)); return; }
          const ended = await readSse(r, async (name, data) => {
            if (name === 'error') { flash(out, data); return; }
            if (name !== 'frame') return;
            frame = data; frames += 1; bytes += data.bytes;
            // A blob: URL, as the page's Content-Security-Policy allows (no data: images).
            const raw = atob(data.data), buf = new Uint8Array(raw.length);
            for (let i = 0; i < raw.length; i++) buf[i] = raw.charCodeAt(i);
            const url = URL.createObjectURL(new Blob([buf], { type: 'image/' + data.format }));
            const old = img.src;
            img.src = url;
            if (old.startsWith('blob:')) URL.revokeObjectURL(old);
            img.dataset.seq = String(data.seq);
            img.dataset.at = String(data.captured_at_ms);
            stats.textContent = `${data.width}×${data.height} · frame ${data.seq} · ${Math.round(data.bytes / 1024)} KB · ${frames} frames, ${Math.round(bytes / 1024)} KB seen`;
          });
          if (ended) return;
        } catch (e) { if (signal.aborted) return; }
        await sleep(1000, signal);
      }
    })();
    const event = (name, ev) => {
      const n = ev.step;
      const words = {
        step_finished: ev.payload?.agent_name === 'Person' ? `step ${n}: the person's input is done` : `step ${n} recorded; the agents observe and think about step ${n + 1}`,
        step_started: ev.payload?.intent ? `step ${n}: ${ev.payload.agent || 'the agent'} acts` : `step ${n} started`,
        question_asked: 'waiting for an answer', action_held: 'waiting for a decision', task_parked: 'waiting for a person',
        takeover_requested: 'a person has the desktop: the agents pause at the next step',
        person_input: 'the person acted', handed_back: 'handed back: the agents observe again',
        task_finished: 'finished', task_failed: 'failed', task_cancelled: 'cancelled',
      };
      if (name === 'takeover_requested') { taken = true; show(); }
      if (name === 'handed_back') { taken = false; show(); }
      if (words[name]) phase.textContent = words[name];
      phase.dataset.kind = name;
    };
    const el = h('section', { id: 'live' }, h('h2', {}, 'Desktop'),
      h('div', { class: 'row' }, take, back, typeForm, phase, stats), out, h('div', { class: 'live-frame' }, img));
    return { el, event };
  }

  // The header is built once per page; a refresh updates its facts, never the controls (a person may be
  // typing a follow-up, or about to click Cancel, when an event arrives).
  function renderHead(head, task, reopen) {
    let parts = head.parts;
    if (!parts) {
      const out = h('p', { class: 'error', id: 'task-error' });
      const cancel = h('button', { class: 'danger', id: 'cancel', onclick: async () => {
        try { await api(head.task.links.cancel, { method: 'POST', body: { reason: 'cancelled from the viewer' } }); reopen(); } catch (e) { flash(out, e); }
      } }, 'Cancel');
      const followText = h('input', { type: 'text', id: 'follow-up', size: 50, placeholder: 'a follow-up request' });
      const followUp = h('form', { class: 'row', id: 'follow-up-form' }, followText, h('button', { type: 'submit', class: 'secondary' }, 'Add request'));
      followUp.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        try { await api(head.task.links.requests, { method: 'POST', body: { request: followText.value } }); followText.value = ''; reopen(); } catch (e) { flash(out, e); }
      });
      parts = head.parts = { nav: h('div', { class: 'row' }), info: h('div', {}), cancel };
      head.replaceChildren(parts.nav, parts.info, h('div', { class: 'row' }, cancel, followUp), out);
    }
    head.task = task;
    const ended = TERMINAL.has(task.status);
    parts.cancel.disabled = ended;
    const trace = config.jaeger_url ? h('a', { id: 'trace', target: '_blank', rel: 'noopener noreferrer',
      href: `${config.jaeger_url}/search?service=${encodeURIComponent(config.trace_service)}&tags=${encodeURIComponent(JSON.stringify({ task_id: task.id }))}` }, 'trace') : null;
    parts.nav.replaceChildren(...[h('a', { href: '#/' }, '← all tasks'), ended ? h('a', { href: `#/task/${task.id}/replay`, id: 'replay-link' }, 'replay') : null, trace].filter(Boolean));
    parts.info.replaceChildren(h('div', {},
      h('h1', {}, task.request),
      h('div', { class: 'row' }, badge(task.status), task.kind === 'demonstration' ? h('span', { class: 'status', id: 'demonstration' }, 'demonstration: a person\'s steps (ufo record)') : null,
        waitingFor(task.waiting_for), task.state ? h('code', {}, task.state) : null,
        h('span', { class: 'muted' }, `${task.totals.steps} steps · ${money(task.totals.cost)} · ${task.totals.input_tokens + task.totals.output_tokens} tokens · ${task.totals.duration_seconds.toFixed(1)} s · created ${age(task.created_at)}`),
        task.cancel_requested && !ended ? h('span', { class: 'status waiting' }, 'cancel requested') : null),
      task.result ? h('p', { id: 'result' }, h('span', { class: 'label' }, 'result '), task.result) : null,
      task.rounds.length > 1 ? h('ol', {}, task.rounds.map((r) => h('li', {}, `${r.request} — ${r.status}${r.result ? ': ' + r.result : ''}`))) : null));
  }

  function renderWaits(waits, task, refresh) {
    // Unchanged questions and hold: keep the form (and what the person is typing in it).
    const signature = JSON.stringify([task.pending_questions, task.held_action]);
    if (waits.dataset.signature === signature) return;
    waits.dataset.signature = signature;
    const parts = [];
    const out = h('p', { class: 'error' });
    if (task.pending_questions.length) {
      const inputs = task.pending_questions.map((q) => h('input', { type: 'text', size: 50, class: 'answer', 'data-index': q.index }));
      const form = h('form', { id: 'answers' }, h('h2', {}, 'The agent asks'),
        task.pending_questions.map((q, i) => h('div', { class: 'row' }, h('span', { class: 'question' }, q.question), inputs[i])),
        h('button', { type: 'submit', id: 'send-answers' }, 'Answer'));
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        // Answers go in the order of the questions shown (the API answers pending questions in order).
        // Bound to the questions on screen: their ids travel with the answers, and a question no longer
        // pending is refused (409) rather than answered.
        const body = { answers: inputs.map((i) => i.value) };
        if (task.pending_questions.every((q) => q.id !== undefined)) body.question_ids = task.pending_questions.map((q) => q.id);
        try { await api(task.links.answers, { method: 'POST', body }); await refresh(); } catch (e) { flash(out, e); }
      });
      parts.push(h('section', { class: 'ask' }, form));
    }
    const held = task.held_action;
    if (held) {
      const reason = h('input', { type: 'text', id: 'decision-reason', size: 40, placeholder: 'reason (optional)' });
      // Bound to the action on screen: its id travels with the decision, and a decision arriving after the
      // hold changed is refused by the API (409) rather than applied to another action.
      const decide = (approve) => async () => {
        const body = { approve };
        if (reason.value) body.reason = reason.value;
        if (held.id !== undefined) body.action_id = held.id;
        try { await api(task.links.confirmation, { method: 'POST', body }); await refresh(); } catch (e) { flash(out, e); }
      };
      parts.push(h('section', { class: 'ask', id: 'held', 'data-step': held.step }, h('h2', {}, 'Held for your approval'),
        h('p', {}, h('b', { class: 'says' }, sentence(held.function, held.arguments, held.target_name)), ` — the ${held.agent_name} wants to do this at step ${held.step}`),
        h('p', { class: 'muted' }, 'why: ' + (held.reason || '—')),
        h('div', { class: 'row' }, reason, h('button', { id: 'approve', onclick: decide(true) }, 'Approve'), h('button', { id: 'reject', class: 'danger', onclick: decide(false) }, 'Reject'))));
    }
    if (parts.length) parts.push(out);
    waits.replaceChildren(...parts);
  }

  // --- a step --------------------------------------------------------------------------------------
  function screenshot(taskId, step, kind) {
    const img = h('img', { alt: `step ${step.step} ${kind} screenshot`, class: 'shot-' + kind });
    const box = h('div', { class: 'shot' }, img);
    image(`/v1/tasks/${taskId}/steps/${step.step}/screenshot?kind=${kind}`).then((url) => {
      img.addEventListener('load', () => { if (kind === 'annotated' || kind === 'clean') overlay(box, img, step); }, { once: true });
      img.src = url;
    }).catch((e) => box.replaceChildren(h('span', { class: 'error' }, e.message)));
    return box;
  }

  // Draws what the step acted on: the control's rectangle and the click point, in image pixels.
  function overlay(box, img, step) {
    const marks = step.acted || [];
    if (!marks.length || !img.naturalWidth) return;
    // The marks are in the clean screenshot's pixels; the annotated image may be the prompt's smaller copy.
    const [w, h] = step.clean_size || [img.naturalWidth, img.naturalHeight];
    const layer = svg('svg', { viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: 'none', class: 'acted' });
    for (const m of marks) {
      if (m.rect) layer.append(svg('rect', { x: m.rect[0], y: m.rect[1], width: m.rect[2] - m.rect[0], height: m.rect[3] - m.rect[1], fill: 'none', stroke: '#e11d48', 'stroke-width': 3 }));
      if (m.point) {
        layer.append(svg('circle', { cx: m.point[0], cy: m.point[1], r: 9, fill: 'none', stroke: '#e11d48', 'stroke-width': 3 }));
        layer.append(svg('circle', { cx: m.point[0], cy: m.point[1], r: 3, fill: '#e11d48' }));
      }
    }
    box.append(layer);
  }

  // What an action does, in a person's words: the text typed or the keys pressed, and the control's name
  // (the raw call stays one click away, in the action's details).
  function sentence(fn, args, target) {
    if (!fn) return 'no action';
    const a = args || {};
    const quote = (t) => { const s = String(t ?? ''); return `"${s.length > 120 ? s.slice(0, 119) + '…' : s}"`; };
    const on = target ? ` “${target}”` : '';
    const button = a.button && a.button !== 'left' ? `${a.button}-` : '';
    switch (fn) {
      case 'click_input': return `${a.double ? 'double-' : ''}${button}click${on || ' a control'}`;
      case 'click_on_coordinates': return `${a.double ? 'double-' : ''}${button}click at (${a.x}, ${a.y})`;
      case 'drag_on_coordinates': return `drag from (${a.start_x}, ${a.start_y}) to (${a.end_x}, ${a.end_y})`;
      case 'set_edit_text': return `type ${quote(a.text)}${target ? ' into' + on : ''}${a.clear_current_text === false ? ' (after its text)' : ''}`;
      case 'keyboard_input': return `press ${quote(a.keys)}${target ? ' in' + on : ''}`;
      case 'wheel_mouse_input': return `scroll ${a.wheel_dist > 0 ? 'up' : 'down'} ${Math.abs(a.wheel_dist || 0)}${target ? ' in' + on : ''}`;
      case 'select_application_window': return `switch to the window${on}`;
      case 'launch_application': return `launch ${a.name || target || 'an application'}${(a.args || []).length ? ' ' + a.args.join(' ') : ''}`;
      case 'wait': return `wait ${a.seconds} s`;
      case 'summary': return `note ${quote(a.text)}`;
      default: {
        const shown = Object.entries(a).filter(([k]) => k !== 'id').map(([k, v]) => `${k}=${typeof v === 'string' ? quote(v) : JSON.stringify(v)}`);
        return `${fn}(${shown.join(', ')})${target ? ' on' + on : ''}`;
      }
    }
  }

  function action(a) {
    const r = a.result;
    const status = r ? r.status : 'none';
    const explain = { failure: 'failed', skipped: 'skipped (an earlier action of the batch failed or changed the window)', none: 'not executed', denied: 'denied by the operator\'s policy', rejected: 'rejected by a person' };
    return h('div', { class: 'action ' + status, 'data-result': status },
      h('div', {}, h('span', { class: 'says' }, sentence(a.function, a.arguments, a.target_name)), ' ', h('span', { class: 'status' }, status)),
      r && r.error ? h('div', { class: 'error' }, `${explain[status] || status}: ${r.error}`) : (status !== 'success' && explain[status] ? h('div', { class: 'muted' }, explain[status]) : null),
      h('details', {}, h('summary', {}, 'call'), h('pre', {}, `${a.function}(${JSON.stringify(a.arguments, null, 2)})`)),
      r && r.result !== null && r.result !== undefined && JSON.stringify(r.result) !== '{}' ? h('details', {}, h('summary', {}, 'result'), h('pre', {}, JSON.stringify(r.result, null, 2))) : null);
  }

  function stepCard(taskId, step) {
    const text = h('div', { class: 'text' },
      h('h2', {}, `Step ${step.step}`, h('span', { class: 'muted' }, ` · round ${step.round}.${step.round_step} · ${step.agent_name}`)),
      h('div', { class: 'row' }, h('code', {}, `${step.state_before || '—'} → ${step.state_after || '—'}`), step.status ? h('span', { class: 'status' }, step.status) : null,
        h('span', { class: 'muted' }, `${money(step.cost)} · ${step.input_tokens}+${step.output_tokens} tokens`)),
      step.subtask ? h('p', {}, h('span', { class: 'label' }, 'subtask '), step.subtask) : null,
      step.observation ? h('p', { class: 'observation' }, h('span', { class: 'label' }, 'observation '), step.observation) : null,
      step.thought ? h('p', { class: 'thought' }, h('span', { class: 'label' }, 'thought '), step.thought) : null,
      step.plan.length ? h('div', {}, h('span', { class: 'label' }, 'plan'), h('ol', {}, step.plan.map((p) => h('li', {}, p)))) : null,
      step.comment ? h('p', {}, h('span', { class: 'label' }, 'comment '), step.comment) : null,
      (step.warnings || []).map((w) => h('p', { class: 'warning' }, h('span', { class: 'label' }, 'warning '), w)),
      step.reuse ? h('p', { class: 'reuse', 'data-source': step.reuse.source }, h('span', { class: 'label' }, 'reuse '),
        step.reuse.source === 'reused' ? `reused step ${step.reuse.step} of task ${step.reuse.of} (no model call)` : `the screen differed from step ${step.reuse.step} of task ${step.reuse.of}; the model decided: ${step.reuse.note || ''}`) : null,
      (step.knowledge || []).length ? h('div', { class: 'knowledge' }, h('span', { class: 'label' }, 'knowledge used'),
        h('ol', {}, step.knowledge.map((k) => h('li', { 'data-kind': k.kind },
          /^https?:\/\//.test(k.source) ? h('a', { href: k.source, rel: 'noopener noreferrer', target: '_blank' }, k.source) : h('code', {}, k.source),
          ` ${k.kind}${k.score > 0 ? ' · ' + k.score.toFixed(2) : ''}${k.title ? ' — ' + k.title : ''}`)))) : null,
      step.actions.length ? h('div', { class: 'actions' }, h('span', { class: 'label' }, 'actions'), step.actions.map(action)) : null,
      step.phases.length ? h('table', { class: 'phases' }, step.phases.map((p) => h('tr', {}, h('td', {}, p.phase), h('td', {}, p.seconds.toFixed(3) + ' s'), h('td', { class: p.success ? '' : 'error' }, p.success ? 'ok' : p.error || 'failed')))) : null);
    const shots = h('div', { class: 'shots' });
    const main = ['annotated', 'clean', 'desktop'].find((k) => step.screenshots.includes(k)) || null;
    if (main) shots.append(screenshot(taskId, step, main));
    const more = h('div', { class: 'row' });
    for (const kind of ['clean', 'desktop'].filter((k) => k !== main && step.screenshots.includes(k))) {
      const b = h('button', { class: 'secondary show-' + kind, onclick: () => { b.remove(); shots.append(h('div', { class: 'label' }, kind), screenshot(taskId, step, kind)); } }, 'show ' + kind);
      more.append(b);
    }
    shots.append(more);
    // The last step of an ended task: the whole desktop after its action.
    if (step.screenshots.includes('after')) {
      shots.append(h('div', { class: 'label' }, 'after the last step'), screenshot(taskId, step, 'after'));
    }
    return h('section', { class: 'card step', 'data-step': step.step }, text, shots);
  }

  // --- replay of a finished task -----------------------------------------------------------------------
  async function replayPage(id, signal) {
    const task = await api('/v1/tasks/' + id, { signal });
    const steps = await allSteps(id, signal);
    const slider = h('input', { type: 'range', id: 'replay-slider', min: 1, max: Math.max(1, steps.length), value: 1 });
    const play = h('button', { id: 'replay-play' }, 'Play');
    const where = h('span', { id: 'replay-position' });
    const view = h('div', { id: 'replay-step' });
    main.replaceChildren(h('section', { class: 'replay' },
      h('div', { class: 'row' }, h('a', { href: '#/task/' + id }, '← task'), badge(task.status)),
      h('h1', {}, task.request),
      steps.length ? [h('div', { class: 'row' }, play, where), slider] : h('p', { class: 'muted' }, 'No steps recorded.'), view));
    if (!steps.length) return;
    const show = () => {
      const step = steps[Number(slider.value) - 1];
      where.textContent = `step ${step.step} of ${steps.length}`;
      view.replaceChildren(stepCard(id, step));
    };
    slider.addEventListener('input', show);
    let timer = null;
    const stop = () => { clearInterval(timer); timer = null; play.textContent = 'Play'; };
    play.addEventListener('click', () => {
      if (timer) return stop();
      if (Number(slider.value) >= steps.length) slider.value = 1;
      play.textContent = 'Pause';
      show();
      timer = setInterval(() => {
        if (Number(slider.value) >= steps.length) return stop();
        slider.value = Number(slider.value) + 1;
        show();
      }, 1200);
    });
    signal.addEventListener('abort', stop);
    show();
  }

  route();
})();
