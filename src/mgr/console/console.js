// console.js - the chanq manager's admin console (doc/mgr.md "Console"). Plain JS, no build
// step, no external URLs, no inline code (the page is served with CSP default-src 'self').
// Logs in with the admin token (POST /api/login: a session cookie plus a CSRF token kept in
// sessionStorage), polls GET /api/state every second and renders the views; changes go through
// the JSON API with the X-CSRF-Token header. Data is written with textContent only.
'use strict';

(function () {
  const POLL_MS = 1000;
  const VIEWS = ['shards', 'servers', 'topics', 'modules', 'bindings', 'relay', 'audit'];
  const TRANSPORTS = ['tcp', 'ws', 'wss', 'kcp'];
  const CHANNEL_TYPES = ['GLOBAL', 'PRIVATE', 'SUBWORLD', 'SPATIAL', 'ENTITY'];

  let csrf = sessionStorage.getItem('chanq_csrf') || '';
  let view = sessionStorage.getItem('chanq_view') || 'shards';
  let timer = null;
  let polling = false;
  const dirtyModules = new Set(); // module ids whose inputs the operator is editing
  let bindings = null; // the state's bindings list; null while the manager never saved any
  let bindingsDirty = false; // the operator is editing the document: polls leave it alone

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'testid')
        e.dataset.testid = v;
      else if (k === 'class')
        e.className = v;
      else if (k === 'text')
        e.textContent = v;
      else
        e.setAttribute(k, v);
    }
    for (const c of children)
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }

  function td(text, testid, cls) {
    const a = { text: text === undefined || text === null ? '-' : String(text) };
    if (testid)
      a.testid = testid;
    if (cls)
      a.class = cls;
    return el('td', a);
  }

  function fmtRate(x) {
    return typeof x === 'number' ? x.toFixed(1) : '-';
  }

  function yesNo(b) {
    return b === true ? 'yes' : b === false ? 'no' : '-';
  }

  function showError(msg) {
    const e = $('action-error');
    e.textContent = msg;
    e.hidden = !msg;
  }

  // ---- API -----------------------------------------------------------------------------------

  // body: an object sent as JSON, or a string sent as it is (the bindings editor's text, so
  // that the manager's errors point into what the operator wrote).
  async function api(method, path, body) {
    const headers = {};
    if (method !== 'GET') {
      headers['Content-Type'] = 'application/json';
      headers['X-CSRF-Token'] = csrf;
    }
    const res = await fetch(path, {
      method,
      headers,
      credentials: 'same-origin',
      body: method === 'GET' ? undefined : typeof body === 'string' ? body : JSON.stringify(body || {}),
    });
    let data = null;
    try {
      data = await res.json();
    } catch (e) {
      data = null;
    }
    if (res.status === 401 && path !== '/api/login')
      showLogin('');
    return { status: res.status, data };
  }

  async function change(method, path, body, what) {
    const r = await api(method, path, body);
    if (r.status !== 200) {
      showError(`${what}: ${(r.data && r.data.error) || 'HTTP ' + r.status}`);
      return false;
    }
    showError('');
    $('status').textContent = `${what}: version ${r.data.version}`;
    await poll();
    return true;
  }

  // ---- login ---------------------------------------------------------------------------------

  function showLogin(err) {
    csrf = '';
    sessionStorage.removeItem('chanq_csrf');
    stopPolling();
    $('view-login').hidden = false;
    $('nav').hidden = true;
    $('logout').hidden = true;
    $('alert-banner').hidden = true;
    for (const v of VIEWS)
      $('view-' + v).hidden = true;
    const e = $('login-error');
    e.textContent = err || '';
    e.hidden = !err;
  }

  function showConsole() {
    $('view-login').hidden = true;
    $('nav').hidden = false;
    $('logout').hidden = false;
    selectView(view);
    startPolling();
  }

  async function login(ev) {
    ev.preventDefault();
    const r = await api('POST', '/api/login', { token: $('login-token').value });
    if (r.status !== 200) {
      showLogin((r.data && r.data.error) || 'HTTP ' + r.status);
      return;
    }
    csrf = r.data.csrf;
    sessionStorage.setItem('chanq_csrf', csrf);
    $('login-token').value = '';
    showConsole();
  }

  async function logout() {
    await api('POST', '/api/logout', {});
    showLogin('');
  }

  // ---- views ---------------------------------------------------------------------------------

  function selectView(v) {
    view = VIEWS.includes(v) ? v : 'shards';
    sessionStorage.setItem('chanq_view', view);
    for (const x of VIEWS) {
      $('view-' + x).hidden = x !== view;
      document.querySelector(`[data-view="${x}"]`).classList.toggle('active', x === view);
    }
    if (view === 'audit')
      loadAudit();
  }

  function renderBanner(st) {
    const b = $('alert-banner');
    const alerts = (st.alerts || []).filter((a) => a.kind === 'repl_lag');
    b.textContent = alerts.map((a) =>
      `Replication lag alert: shard ${a.shard} standby is ${a.behind_ms} ms behind ` +
      `(threshold ${st.lag_alert_ms} ms)`).join(' \u00b7 ');
    b.hidden = alerts.length === 0;
  }

  function renderShards(st) {
    const body = $('shards-body');
    body.replaceChildren();
    for (const s of st.shards || []) {
      const r = s.repl || {};
      const tr = el('tr', { testid: `shard-row-${s.shard}`, class: s.alert ? 'alert' : '' });
      tr.dataset.alert = s.alert ? '1' : '0';
      tr.append(td(s.shard),
        td(s.master === null || s.master === undefined ? 'none' : s.master, `shard-master-${s.shard}`),
        td((s.standbys || []).join(', ') || 'none', `shard-standbys-${s.shard}`),
        td(s.repl ? yesNo(r.io_running) : '-', `shard-io-${s.shard}`),
        td(s.repl ? yesNo(r.sql_running) : '-', `shard-sql-${s.shard}`),
        td(s.repl && r.lag_seconds >= 0 ? r.lag_seconds : '-', `shard-lag-${s.shard}`),
        td(s.repl ? r.behind_ms : '-', `shard-behind-${s.shard}`));
      body.append(tr);
    }
    if (!body.children.length)
      body.append(el('tr', {}, el('td', { colspan: '7', text: 'no shard reported yet' })));
  }

  function serverState(s) {
    if (s.offline)
      return s.draining ? 'offline (draining)' : 'offline';
    return s.stale ? 'stale' : 'live';
  }

  function renderServers(st) {
    const body = $('servers-body');
    body.replaceChildren();
    for (const s of st.servers || []) {
      const si = s.serverinfo || {};
      const id = s.appid;
      const tr = el('tr', { testid: `server-row-${id}`,
        class: s.stale ? 'stale' : s.offline ? 'offline' : s.config_behind ? 'behind' : '' });
      const btn = el('button', { type: 'button', testid: `server-toggle-${id}`,
        text: s.offline ? 'Bring online' : 'Take offline' });
      btn.addEventListener('click', () => {
        // taking a server out of service refuses its produces: asked first (issue 25)
        if (!s.offline && !window.confirm(`Take server ${id} (${s.addr}) offline? It refuses ` +
          'produces (server_offline) until it is brought online again.'))
          return;
        change('POST', `/api/servers/${id}/${s.offline ? 'online' : 'offline'}`, {},
          `server ${id} ${s.offline ? 'online' : 'offline'}`);
      });
      tr.append(td(id), td(s.group_id), td(s.addr, `server-addr-${id}`), td(s.shard),
        td(s.master ? 'master' : 'slave', `server-role-${id}`),
        td(serverState(s) + (s.stale ? ` (${Math.round(s.age_ms / 1000)} s)` : ''), `server-state-${id}`),
        td(si.threads), td(si.cpu, `server-cpu-${id}`), td(si.mem, `server-mem-${id}`),
        td(si.sockets, `server-sockets-${id}`), td(si.packages, `server-packages-${id}`),
        td(fmtRate(s.produce_rate), `server-produce-rate-${id}`),
        td(fmtRate(s.consume_rate), `server-consume-rate-${id}`),
        td(s.config_behind ? `${s.config_version ?? 'none'} (behind ${st.version})`
          : s.config_version, `server-config-${id}`), el('td', {}, btn));
      body.append(tr);
    }
    if (!body.children.length)
      body.append(el('tr', {}, el('td', { colspan: '15', text: 'no server reported yet' })));
  }

  function renderTopics(st) {
    const body = $('topics-body');
    body.replaceChildren();
    for (const t of st.topics || []) {
      const n = t.name;
      const tr = el('tr', { testid: `topic-row-${n}`, class: t.online ? '' : 'offline' });
      const shards = (t.shards || []).map((s) => `shard ${s.shard}: ${s.last_offset}`).join('; ');
      const cons = (t.consumers || []).map((c) => `${c.id}@${c.shard}: ${c.lag}`).join('; ');
      const btn = el('button', { type: 'button', testid: `topic-toggle-${n}`,
        text: t.online ? 'Take offline' : 'Bring online' });
      btn.addEventListener('click', () => {
        if (t.online && !window.confirm(`Take topic ${n} offline? Every shard refuses its ` +
          'produces and consumes (topic_offline) until it is brought online again.'))
          return;
        change('POST', `/api/topics/${encodeURIComponent(n)}/${t.online ? 'offline' : 'online'}`,
          {}, `topic ${n} ${t.online ? 'offline' : 'online'}`);
      });
      const r = t.retention;
      const keep = r === null || r === undefined ? "each server's own"
        : r === 0 ? 'forever' : r % 86400 === 0 ? `${r / 86400} days` : `${r} s`;
      tr.append(td(n), td(t.online ? 'online' : 'offline', `topic-state-${n}`),
        td(keep, `topic-retention-${n}`),
        td(fmtRate(t.produce_rate), `topic-rate-${n}`), td(shards || '-', `topic-shards-${n}`),
        td(cons || '-', `topic-consumers-${n}`), el('td', {}, btn));
      body.append(tr);
    }
    if (!body.children.length)
      body.append(el('tr', {}, el('td', { colspan: '7', text: 'no topic yet' })));
  }

  function splitList(s) {
    return s.split(',').map((x) => x.trim()).filter((x) => x.length > 0);
  }

  function moduleBody(produce, consume, admin, groups, token) {
    const b = { produce: splitList(produce), consume: splitList(consume), admin };
    const g = splitList(groups);
    if (g.length)
      b.groups = g.map((x) => Number(x));
    if (token)
      b.token = token;
    return b;
  }

  function moduleRow(id, m) {
    const tr = el('tr', { testid: `module-row-${id}` });
    const mark = () => dirtyModules.add(id);
    const prod = el('input', { testid: `module-produce-${id}`, value: (m.produce || []).join(', ') });
    const cons = el('input', { testid: `module-consume-${id}`, value: (m.consume || []).join(', ') });
    const adm = el('input', { type: 'checkbox', testid: `module-admin-${id}` });
    adm.checked = !!m.admin;
    const grp = el('input', { size: '6', testid: `module-groups-${id}`,
      value: (m.groups || []).join(', ') });
    for (const i of [prod, cons, adm, grp])
      i.addEventListener('input', mark);
    const save = el('button', { type: 'button', testid: `module-save-${id}`, text: 'Save' });
    save.addEventListener('click', async () => {
      const ok = await change('PUT', `/api/modules/${id}`,
        moduleBody(prod.value, cons.value, adm.checked, grp.value, ''), `module ${id} saved`);
      if (ok) {
        dirtyModules.delete(id);
        await poll();
      }
    });
    const del = el('button', { type: 'button', testid: `module-delete-${id}`, text: 'Delete' });
    del.addEventListener('click', async () => {
      if (await change('DELETE', `/api/modules/${id}`, {}, `module ${id} deleted`))
        dirtyModules.delete(id);
    });
    tr.append(td(id), el('td', {}, prod), el('td', {}, cons), el('td', {}, adm), el('td', {}, grp),
      el('td', {}, save), el('td', {}, del));
    tr.dataset.json = JSON.stringify(m);
    return tr;
  }

  // Rows being edited are kept as they are; the others follow the state.
  function renderModules(st) {
    const body = $('modules-body');
    const mods = st.modules || {};
    const ids = Object.keys(mods).sort((a, b) => Number(a) - Number(b));
    const old = new Map([...body.querySelectorAll('tr[data-testid^="module-row-"]')]
      .map((r) => [r.dataset.testid.slice('module-row-'.length), r]));
    const rows = ids.map((id) => {
      const o = old.get(id);
      if (o && (dirtyModules.has(id) || o.dataset.json === JSON.stringify(mods[id])))
        return o;
      return moduleRow(id, mods[id]);
    });
    for (const id of dirtyModules)
      if (!(id in mods))
        dirtyModules.delete(id);
    if (rows.length !== body.children.length || rows.some((r, i) => body.children[i] !== r))
      body.replaceChildren(...rows);
  }

  async function addModule() {
    const id = $('module-new-id').value.trim();
    const ok = await change('PUT', `/api/modules/${encodeURIComponent(id)}`,
      moduleBody($('module-new-produce').value, $('module-new-consume').value,
        $('module-new-admin').checked, $('module-new-groups').value, $('module-new-token').value),
      `module ${id} added`);
    if (ok)
      for (const f of ['id', 'produce', 'consume', 'groups', 'token'])
        $('module-new-' + f).value = '';
  }

  // ---- bindings ------------------------------------------------------------------------------

  function bindingTarget(b) {
    if (typeof b.broadcast === 'string')
      return `broadcast ${b.broadcast}`;
    return typeof b.route === 'string' ? `route ${b.route}` : '-';
  }

  // Topic names compare case-insensitively (doc/bridge.md), fields exactly.
  function bindingKey(b) {
    return `${String(b.topic).toLowerCase()}\u0000${bindingTarget(b)}`;
  }

  function bindingsText(list) {
    return JSON.stringify({ bindings: list || [] }, null, 2);
  }

  function bindingsError(msg) {
    const e = $('bindings-error');
    e.textContent = msg;
    e.hidden = !msg;
  }

  function renderBindings(st) {
    bindings = Array.isArray(st.bindings) ? st.bindings : null;
    const list = bindings || [];
    $('bindings-managed').textContent = bindings === null
      ? 'Not managed: each server uses its own --bridge-file. The first save makes these ' +
        'bindings the only ones on every server of this manager.'
      : `Managed: ${list.length} binding${list.length === 1 ? '' : 's'} in force on every ` +
        'server of this manager (their --bridge-file is no longer read).';
    $('bindings-managed').dataset.managed = bindings === null ? '0' : '1';
    const rows = list.map((b, i) => el('tr', { testid: `binding-row-${i}` },
      td(b.topic, `binding-topic-${i}`), td(bindingTarget(b), `binding-target-${i}`),
      td(b.msg_type, `binding-msgtype-${i}`)));
    if (!rows.length)
      rows.push(el('tr', {}, el('td', { colspan: '3', text: 'no binding' })));
    $('bindings-body').replaceChildren(...rows);
    if (!bindingsDirty)
      $('bindings-editor').value = bindingsText(list);
  }

  // What a save would do that cannot be undone from here without retyping it: the first save
  // replaces every server's --bridge-file bindings; a later one may remove bindings in force.
  // Returns the question to confirm, or '' when there is nothing to confirm.
  function bindingsQuestion(text) {
    let doc = null;
    try {
      doc = JSON.parse(text);
    } catch (e) {
      return ''; // not JSON: the manager refuses it and says where
    }
    if (bindings === null)
      return 'The first save replaces the --bridge-file bindings of every server of this ' +
        'manager, and their files are no longer read. Save?';
    const next = new Set((doc && Array.isArray(doc.bindings) ? doc.bindings : [])
      .filter((b) => b && typeof b === 'object').map(bindingKey));
    const gone = bindings.filter((b) => !next.has(bindingKey(b)));
    if (!gone.length)
      return '';
    return `Remove ${gone.length} binding${gone.length === 1 ? '' : 's'} (` +
      gone.map((b) => `${b.topic} \u2192 ${bindingTarget(b)}`).join(', ') +
      ')? Their events are no longer delivered. Save?';
  }

  // A shorter retention deletes the older messages at the next purge: asked first.
  async function setRetention() {
    const topic = $('retention-topic').value.trim();
    const days = Number($('retention-days').value);
    if (days > 0 && !window.confirm(`Keep topic ${topic}'s messages ${days} days? Older ` +
      'messages are deleted on every shard at the next purge.'))
      return;
    await change('PUT', `/api/topics/${encodeURIComponent(topic)}/retention`,
      { days: Number.isInteger(days) ? days : $('retention-days').value },
      `topic ${topic} retention`);
  }

  // Invalidates one message (issue 25): asked first; the answer comes once the shard's master
  // has done it. Its answer has no version: its own status line.
  async function invalidateMessage() {
    const topic = $('invalidate-topic').value.trim();
    const shard = $('invalidate-shard').value.trim();
    const offset = $('invalidate-offset').value.trim();
    const reason = $('invalidate-reason').value;
    const what = `topic ${topic} shard ${shard} offset ${offset}`;
    if (!window.confirm(`Invalidate the message of ${what}? No consumer, watcher or resume ` +
      'gets it again.'))
      return;
    const r = await api('POST', `/api/topics/${encodeURIComponent(topic)}/messages/` +
      `${encodeURIComponent(shard)}/${encodeURIComponent(offset)}/invalidate`, { reason });
    if (r.status !== 200) {
      showError(`invalidate ${what}: ${(r.data && r.data.error) || 'HTTP ' + r.status}`);
      return;
    }
    showError('');
    $('status').textContent = `${what}: invalid (state 0)`;
    $('invalidate-reason').value = '';
  }

  // One message looked up on its shard's standby: its fields, then who consumed past it.
  function lookupText(d) {
    const m = d.message || {};
    const lines = [
      `topic ${d.topic} shard ${d.shard} offset ${d.offset} (read on ${d.role} ${d.served_by})`,
      `state ${m.state === 0 ? '0 invalid' : '1 valid'}`,
      `produced ${new Date(m.create_time).toISOString()} by producer ${m.producer_id} seq ${m.seq}`,
      `size ${m.size} bytes${m.truncated ? ' (truncated)' : ''}`,
      m.content !== undefined ? `content ${m.content}` : `content (hex) ${m.content_hex}`,
    ];
    for (const c of d.consumers || [])
      lines.push(`consumer ${c.id} at ${c.offset}: ${c.consumed ? 'consumed' : 'not yet'}`);
    return lines.join('\n');
  }

  async function lookupMessage() {
    const topic = $('lookup-topic').value.trim();
    const path = `/api/topics/${encodeURIComponent(topic)}/messages/` +
      `${encodeURIComponent($('lookup-shard').value.trim())}/` +
      `${encodeURIComponent($('lookup-offset').value.trim())}`;
    const r = await api('GET', path);
    const out = $('lookup-result');
    if (r.status !== 200) {
      showError(`look up: ${(r.data && r.data.error) || 'HTTP ' + r.status}`);
      out.hidden = true;
      return;
    }
    showError('');
    out.textContent = lookupText(r.data);
    out.hidden = false;
  }

  // A new topic, made by every shard's master (an empty retention: each server's own).
  async function createTopic() {
    const topic = $('create-topic').value.trim();
    const raw = $('create-days').value.trim();
    const body = { topic };
    if (raw !== '')
      body.retention_days = Number.isInteger(Number(raw)) ? Number(raw) : raw;
    if (await change('POST', '/api/topics', body, `topic ${topic} created`))
      $('create-topic').value = '';
  }

  async function saveBindings() {
    const text = $('bindings-editor').value;
    const q = bindingsQuestion(text);
    if (q && !window.confirm(q))
      return;
    const r = await api('PUT', '/api/bindings', text);
    if (r.status !== 200) {
      // the manager's exact message (the bindings parser's for a bad document)
      bindingsError((r.data && r.data.error) || `HTTP ${r.status}`);
      return;
    }
    bindingsError('');
    bindingsDirty = false;
    $('status').textContent = `bindings saved: version ${r.data.version}`;
    await poll();
  }

  function resetBindings() {
    bindingsDirty = false;
    bindingsError('');
    $('bindings-editor').value = bindingsText(bindings);
  }

  function kv(tbody, obj, keys, prefix) {
    tbody.replaceChildren(...keys.map((k) => el('tr', {}, el('th', { text: k }),
      td(obj && obj[k] !== undefined ? obj[k] : 0, `${prefix}-${k}`))));
  }

  function renderRelay(st) {
    const r = st.relay || {};
    kv($('relay-conns'), r.connections, TRANSPORTS, 'relay-conn');
    kv($('relay-chans'), r.channels, CHANNEL_TYPES, 'relay-chan');
    $('relay-subscribers').textContent = r.subscribers ?? 0;
    $('relay-fanouts').textContent = fmtRate(r.fanouts_per_s ?? 0);
    $('relay-slow').textContent = r.slow_consumer_closes ?? 0;
    renderRelayNodes(st);
  }

  // One entry per relay node: a node restarted on another MQ port (a new appid) reports twice
  // until the old report is stale; the live one is shown.
  function relayNodes(st) {
    const seen = new Map();
    for (const n of st.relay_nodes || []) {
      const k = `${n.cluster}-${n.node}`;
      const o = seen.get(k);
      if (!o || (o.stale && !n.stale))
        seen.set(k, n);
    }
    return [...seen.entries()];
  }

  function nodeState(n) {
    if (n.offline)
      return 'offline';
    return n.stale ? `stale (${Math.round(n.age_ms / 1000)} s)` : 'live';
  }

  function addrList(a) {
    return TRANSPORTS.filter((t) => a && a[t]).map((t) => `${t} ${a[t]}`).join(' \u00b7 ') || 'none';
  }

  function relayNodeRow(k, n) {
    const c = n.connections || {};
    const ch = n.channels || {};
    const tr = el('tr', { testid: `relay-node-row-${k}`, class: n.stale ? 'stale' : n.offline ? 'offline' : '' });
    tr.dataset.home = n.home ? '1' : '0';
    const chans = td(CHANNEL_TYPES.reduce((sum, t) => sum + (ch[t] || 0), 0), `relay-node-channels-${k}`);
    chans.title = CHANNEL_TYPES.map((t) => `${t} ${ch[t] || 0}`).join(', ');
    tr.append(td(n.cluster), td(n.node), td(nodeState(n), `relay-node-state-${k}`),
      td(addrList(n.addrs), `relay-node-addrs-${k}`),
      td(TRANSPORTS.map((t) => `${t} ${c[t] || 0}`).join(' \u00b7 '), `relay-node-conns-${k}`),
      chans, td(n.subscribers, `relay-node-subs-${k}`),
      td(n.home ? 'home' : '', `relay-node-home-${k}`, n.home ? 'home' : ''),
      td(n.members, `relay-node-members-${k}`));
    return tr;
  }

  function relayLinkRow(k, n, l) {
    const id = `${k}-${l.peer}`;
    const tr = el('tr', { testid: `relay-link-row-${id}`, class: l.up ? '' : 'offline' });
    const pk = td(`${fmtRate(l.packets_in_per_s)} / ${fmtRate(l.packets_out_per_s)}`, `relay-link-pkts-${id}`);
    pk.title = `totals: ${l.packets_in} in, ${l.packets_out} out, ${l.bytes_out} bytes out`;
    tr.append(td(`${n.cluster} ${n.node}`), td(l.peer), td(l.up ? 'up' : 'down', `relay-link-up-${id}`),
      pk, td(fmtRate(l.bytes_out_per_s), `relay-link-bytes-${id}`), td(l.gaps, `relay-link-gaps-${id}`),
      td(l.resets, `relay-link-resets-${id}`), td(l.lost, `relay-link-lost-${id}`, l.lost ? 'loss' : ''));
    return tr;
  }

  function renderRelayNodes(st) {
    const nodes = relayNodes(st);
    const rows = nodes.map(([k, n]) => relayNodeRow(k, n));
    if (!rows.length)
      rows.push(el('tr', {}, el('td', { colspan: '9', text: 'no relay node reported yet' })));
    $('relay-nodes-body').replaceChildren(...rows);
    const links = nodes.flatMap(([k, n]) => (n.links || []).map((l) => relayLinkRow(k, n, l)));
    if (!links.length)
      links.push(el('tr', {}, el('td', { colspan: '8', text: 'no link reported yet' })));
    $('relay-links-body').replaceChildren(...links);
  }

  async function loadAudit() {
    const r = await api('GET', '/api/audit?limit=100');
    if (r.status !== 200)
      return;
    const body = $('audit-body');
    const entries = (r.data.entries || []).slice().reverse(); // newest first
    body.replaceChildren(...entries.map((e, i) => el('tr', { testid: `audit-row-${i}` },
      td(e.time), td(e.addr), td(e.auth), td(e.action, `audit-action-${i}`),
      td(e.target, `audit-target-${i}`), td(e.version), td(e.result, `audit-result-${i}`))));
  }

  function render(st) {
    $('status').textContent = `config version ${st.version} \u00b7 ${(st.servers || []).length} servers \u00b7 ` +
      new Date(st.now_ms).toISOString().slice(11, 19) + ' UTC';
    $('status').dataset.version = String(st.version);
    renderBanner(st);
    renderShards(st);
    renderServers(st);
    renderTopics(st);
    renderModules(st);
    renderBindings(st);
    renderRelay(st);
  }

  // ---- polling -------------------------------------------------------------------------------

  // ---- charts: the manager's samples of the last hour (GET /api/charts), as SVG lines --------

  const SVG = 'http://www.w3.org/2000/svg';
  const CHART_W = 240;
  const CHART_H = 48;

  function fmtValue(v) {
    return Math.abs(v) >= 100 || Number.isInteger(v) ? String(Math.round(v)) : v.toFixed(2);
  }

  // One series: a polyline over its non-null points (gaps break it), its key and last value.
  function chart(key, t, values) {
    const pts = values.map((v, i) => [i, v]).filter(([, v]) => v !== null);
    const max = Math.max(1, ...pts.map(([, v]) => v));
    const x = (i) => (t.length > 1 ? (i / (t.length - 1)) * CHART_W : 0);
    const y = (v) => CHART_H - (v / max) * (CHART_H - 2) - 1;
    const svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('width', CHART_W);
    svg.setAttribute('height', CHART_H);
    svg.setAttribute('viewBox', `0 0 ${CHART_W} ${CHART_H}`);
    svg.dataset.testid = `chart-${key}`;
    let run = [];
    const flush = () => {
      if (run.length) {
        const pl = document.createElementNS(SVG, 'polyline');
        pl.setAttribute('points', run.join(' '));
        svg.append(pl);
      }
      run = [];
    };
    values.forEach((v, i) => (v === null ? flush() : run.push(`${x(i).toFixed(1)},${y(v).toFixed(1)}`)));
    flush();
    const last = pts.length ? pts[pts.length - 1][1] : null;
    if (pts.length) { // the last point, visible also when it is the only one
      const [i, v] = pts[pts.length - 1];
      const dot = document.createElementNS(SVG, 'circle');
      dot.setAttribute('cx', x(i).toFixed(1));
      dot.setAttribute('cy', y(v).toFixed(1));
      dot.setAttribute('r', '2');
      svg.append(dot);
    }
    return el('figure', { class: 'chart' }, svg,
      el('figcaption', {}, `${key} `, el('b', { testid: `chart-last-${key}`,
        text: last === null ? '-' : fmtValue(last) }), ` (max ${fmtValue(max)})`));
  }

  // The charts of a view: topics (rates, consumers' lag), shards (replication lag), servers.
  const CHART_VIEWS = { topics: 'topic', shards: 'shard', servers: 'server' };

  async function loadCharts(kind) {
    const r = await api('GET', `/api/charts?prefix=${kind}/`);
    if (r.status !== 200)
      return;
    const box = $(`charts-${kind}`);
    box.replaceChildren(...Object.keys(r.data.series).sort()
      .map((k) => chart(k, r.data.t, r.data.series[k])));
  }

  async function poll() {
    if (polling)
      return;
    polling = true;
    try {
      const r = await api('GET', '/api/state');
      if (r.status === 200) {
        render(r.data);
        if (view === 'audit')
          await loadAudit();
        if (CHART_VIEWS[view])
          await loadCharts(CHART_VIEWS[view]);
      }
    } catch (e) {
      $('status').textContent = 'manager unreachable';
    } finally {
      polling = false;
    }
  }

  function startPolling() {
    if (timer === null) {
      poll();
      timer = setInterval(poll, POLL_MS);
    }
  }

  function stopPolling() {
    if (timer !== null)
      clearInterval(timer);
    timer = null;
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', login);
    $('logout').addEventListener('click', logout);
    $('module-new-save').addEventListener('click', addModule);
    $('bindings-save').addEventListener('click', saveBindings);
    $('retention-set').addEventListener('click', setRetention);
    $('create-set').addEventListener('click', createTopic);
    $('invalidate-set').addEventListener('click', invalidateMessage);
    $('lookup-get').addEventListener('click', lookupMessage);
    $('bindings-reset').addEventListener('click', resetBindings);
    $('bindings-editor').addEventListener('input', () => {
      bindingsDirty = true;
    });
    for (const b of document.querySelectorAll('nav button'))
      b.addEventListener('click', () => selectView(b.dataset.view));
    if (csrf)
      showConsole(); // a reload: the cookie may still be good; a 401 shows the login
    else
      showLogin('');
  });
})();
