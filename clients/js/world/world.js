// The spatial world page: a top-down map (x to the right, z down) of chanqd's spatial grid.
// One CLIENT connection over ws(s) to the page's own origin (?ws=URL overrides; dev auth):
//   - the regions come from DEBUG_GET_SPATIAL_REGIONS (chanqd --dev), or failing that from a
//     SPATIAL_REGIONS_UPDATE; each server's cells get its own colour;
//   - the page says hello (user message 200) on GLOBAL; the world bots (world/bots.mjs), which
//     own GLOBAL, answer (201, {player, radius}) and then keep an UPDATE_SPATIAL_INTEREST
//     sphere around the player entity for this connection. The cells chanqd subscribes the
//     page to are drawn by their damping: the fanOutIntervalMs of the SUB result
//     (20 / 50 / 100 / other);
//   - entities: the page subscribes to every ENTITY channel (LIST_CHANNEL, and the ids in the
//     cells' SpatialChannelData) and draws each at its EntityChannelData position;
//   - every CHANNEL_DATA_HANDOVER flashes the source and destination cell borders.
// window.__world is the page's state, for the browser test (tests/browser/world.test.mjs).
import { ChannelDataAccess, ChannelType, ChanqClient, TypeRegistry } from '../src/index.js';
import worldDescriptor from '../gen/world.js';

const HELLO = 200;
const WELCOME = 201;
const ENTITY = 'chanqworld.EntityChannelData';
const CELL = 'chanqworld.SpatialChannelData';
const SERVER_COLORS = ['#cfe3ff', '#ffe0c2', '#d6f5d6', '#f3d6f5', '#fff4b3', '#d9d9d9', '#c2f0f0', '#f5cccc', '#e0d6ff'];
const DAMPING_COLORS = { 20: '#e53935', 50: '#fb8c00', 100: '#fdd835' };
const OTHER_DAMPING = '#1e88e5';
const FLASH_MS = 800;

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);

const world = {
  connId: 0,
  ready: false,
  regions: [],
  servers: 0,
  entities: {},
  player: 0,
  radius: 0,
  interest: {},
  handoverCount: 0,
  handovers: [],
  errors: [],
};
window.__world = world;

let client = null;
let grid = null;
const flashes = [];
const subscribing = new Set();

function wsUrl() {
  if (params.get('ws'))
    return params.get('ws');
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/`;
}

function setStatus(text, cls = '') {
  $('status').textContent = text;
  $('status').className = `status ${cls}`;
}

function fail(err) {
  const msg = String(err && err.message ? err.message : err);
  world.errors.push(msg);
  setStatus(msg, 'error');
}

// ---- connection -----------------------------------------------------------------------------

async function start() {
  client = new ChanqClient({ registry: new TypeRegistry().add(worldDescriptor) });
  client.on('error', fail);
  client.on('close', (reason) => setStatus(`disconnected: ${reason}`, 'error'));
  client.on('spatialRegions', (e) => setRegions(e.regions));
  client.on('subscribed', onSubscribed);
  client.on('unsubscribed', onUnsubscribed);
  client.on('channelData', onChannelData);
  client.on('channelRemoved', (e) => delete world.entities[e.channelId]);
  client.on('handover', onHandover);
  client.on('userMessage', onUserMessage);
  setStatus('connecting…');
  await client.connect(wsUrl());
  const res = await client.auth(`viewer-${Math.floor(Math.random() * 1e9)}`, 'world');
  world.connId = res.connId;
  setStatus(`conn ${res.connId}`, 'online');
  try {
    setRegions(await client.debugGetSpatialRegions({ timeoutMs: 5000 }));
  } catch (err) {
    // Without --dev there is no debug query; the regions come with SPATIAL_REGIONS_UPDATE.
    world.errors.push(`regions: ${err.message}`);
  }
  hello();
  refreshEntities();
  setInterval(refreshEntities, 1000);
  requestAnimationFrame(draw);
}

// Says hello until the bots answer (they may start after the page).
function hello() {
  if (world.player)
    return;
  client.sendUserMessage(0, 0, HELLO, 'hello');
  setTimeout(hello, 1000);
}

function onUserMessage(m) {
  if (m.msgType !== WELCOME)
    return;
  const w = JSON.parse(new TextDecoder().decode(m.payload));
  world.player = w.player;
  world.radius = w.radius;
}

// ---- regions --------------------------------------------------------------------------------

function setRegions(regions) {
  if (!regions || !regions.length)
    return;
  world.regions = regions.map((r) => ({ channelId: r.channelId, serverIndex: r.serverIndex,
    minX: r.min.x, minZ: r.min.z, maxX: r.max.x, maxZ: r.max.z }));
  world.servers = new Set(regions.map((r) => r.serverIndex)).size;
  const g = { minX: Infinity, minZ: Infinity, maxX: -Infinity, maxZ: -Infinity, cells: new Map() };
  for (const r of world.regions) {
    g.minX = Math.min(g.minX, r.minX);
    g.minZ = Math.min(g.minZ, r.minZ);
    g.maxX = Math.max(g.maxX, r.maxX);
    g.maxZ = Math.max(g.maxZ, r.maxZ);
    g.cells.set(r.channelId, r);
  }
  grid = g;
  const canvas = $('map');
  const pad = 20;
  const scale = (canvas.width - 2 * pad) / (g.maxX - g.minX);
  canvas.height = Math.ceil((g.maxZ - g.minZ) * scale + 2 * pad);
  grid.pad = pad;
  grid.scale = scale;
  world.ready = true;
  const legend = $('legend');
  legend.textContent = '';
  for (let s = 0; s < world.servers; s++)
    legend.append(item(SERVER_COLORS[s % SERVER_COLORS.length], `server ${s}`));
}

function item(color, text) {
  const li = document.createElement('li');
  const sw = document.createElement('span');
  sw.className = 'swatch';
  sw.style.background = color;
  li.append(sw, text);
  return li;
}

// ---- subscriptions and data -----------------------------------------------------------------

function onSubscribed(e) {
  if (e.connId !== world.connId)
    return;
  if (e.channelType === ChannelType.SPATIAL) {
    world.interest[e.channelId] = e.subOptions.fanOutIntervalMs;
    showInterest();
  }
}

function onUnsubscribed(e) {
  if (e.connId !== world.connId)
    return;
  if (e.channelType === ChannelType.SPATIAL) {
    delete world.interest[e.channelId];
    showInterest();
  }
}

function showInterest() {
  const ul = $('interest');
  ul.textContent = '';
  for (const [cell, ms] of Object.entries(world.interest))
    ul.append(item(DAMPING_COLORS[ms] || OTHER_DAMPING, `${cell}: ${ms} ms`));
}

async function refreshEntities() {
  try {
    const list = await client.listChannels(ChannelType.ENTITY);
    for (const ch of list)
      subscribeEntity(ch.channelId);
  } catch (err) {
    world.errors.push(`list: ${err.message}`);
  }
}

function subscribeEntity(id) {
  if (client.subscriptions.has(id) || subscribing.has(id))
    return;
  subscribing.add(id);
  client.subToChannel(id, { dataAccess: ChannelDataAccess.READ_ACCESS, fanOutIntervalMs: 50 }, 0, { timeoutMs: 5000 })
    .catch(() => {}) // a handover may have subscribed the page first: then there is no reply
    .finally(() => subscribing.delete(id));
}

function onChannelData(e) {
  if (e.typeName === ENTITY && e.data) {
    applyEntity(e.channelId, e.data);
  } else if (e.typeName === CELL && e.data) {
    for (const [id, st] of Object.entries(e.data.entities || {})) {
      if (!st.removed)
        subscribeEntity(Number(id));
    }
  }
}

function applyEntity(id, d) {
  const ent = world.entities[id] || (world.entities[id] = { x: 0, z: 0, name: '', color: 0x555555, seq: 0, updates: 0 });
  if (d.transform && d.transform.position) {
    ent.x = d.transform.position.x;
    ent.z = d.transform.position.z;
  }
  if (d.name)
    ent.name = d.name;
  if (d.color)
    ent.color = d.color;
  if (d.seq)
    ent.seq = d.seq;
  ent.updates++;
}

function onHandover(h) {
  const ids = h.data && h.data.entities ? Object.keys(h.data.entities).map(Number) : [];
  world.handoverCount++;
  world.handovers.push({ src: h.srcChannelId, dst: h.dstChannelId, contextConnId: h.contextConnId, ids });
  if (world.handovers.length > 100)
    world.handovers.shift();
  // New subscribers get the entity's full data in the handover (doc/spatial.md).
  for (const [id, st] of Object.entries(h.data ? h.data.entities || {} : {})) {
    if (st.entityData && st.entityData.data)
      applyEntity(Number(id), st.entityData.data);
  }
  const until = performance.now() + FLASH_MS;
  flashes.push({ cell: h.srcChannelId, until }, { cell: h.dstChannelId, until });
  $('handover-count').textContent = String(world.handoverCount);
  const li = document.createElement('li');
  li.textContent = `${h.srcChannelId} → ${h.dstChannelId}${ids.length ? ` [${ids.join(' ')}]` : ''}`;
  $('handovers').prepend(li);
  while ($('handovers').children.length > 12)
    $('handovers').lastChild.remove();
}

// ---- drawing --------------------------------------------------------------------------------

function px(x) {
  return grid.pad + (x - grid.minX) * grid.scale;
}

function pz(z) {
  return grid.pad + (z - grid.minZ) * grid.scale;
}

function cellRect(r) {
  return [px(r.minX), pz(r.minZ), (r.maxX - r.minX) * grid.scale, (r.maxZ - r.minZ) * grid.scale];
}

function hex(c) {
  return `#${(c >>> 0).toString(16).padStart(6, '0').slice(-6)}`;
}

function draw(now) {
  requestAnimationFrame(draw);
  const canvas = $('map');
  const g2 = canvas.getContext('2d');
  g2.clearRect(0, 0, canvas.width, canvas.height);
  if (!grid)
    return;
  // Regions, by server.
  for (const r of world.regions) {
    g2.fillStyle = SERVER_COLORS[r.serverIndex % SERVER_COLORS.length];
    g2.fillRect(...cellRect(r));
  }
  // Interest: a tint and an inner border coloured by damping distance.
  for (const [cell, ms] of Object.entries(world.interest)) {
    const r = grid.cells.get(Number(cell));
    if (!r)
      continue;
    const [x, y, w, h] = cellRect(r);
    const color = DAMPING_COLORS[ms] || OTHER_DAMPING;
    g2.globalAlpha = 0.18;
    g2.fillStyle = color;
    g2.fillRect(x, y, w, h);
    g2.globalAlpha = 1;
    g2.strokeStyle = color;
    g2.lineWidth = 4;
    g2.strokeRect(x + 4, y + 4, w - 8, h - 8);
  }
  // Grid lines and cell ids.
  g2.strokeStyle = '#666';
  g2.lineWidth = 1;
  g2.fillStyle = '#333';
  g2.font = '12px ui-monospace, monospace';
  for (const r of world.regions) {
    const [x, y, w, h] = cellRect(r);
    g2.strokeRect(x, y, w, h);
    g2.fillText(`${r.channelId} · s${r.serverIndex}`, x + 8, y + 18);
  }
  // Handover flashes.
  while (flashes.length && flashes[0].until < now)
    flashes.shift();
  for (const f of flashes) {
    const r = grid.cells.get(f.cell);
    if (!r)
      continue;
    g2.globalAlpha = Math.max(0, Math.min(1, (f.until - now) / FLASH_MS));
    g2.strokeStyle = '#000';
    g2.lineWidth = 6;
    g2.strokeRect(...cellRect(r));
    g2.globalAlpha = 1;
  }
  // The player's interest sphere.
  const player = world.entities[world.player];
  if (player && world.radius) {
    g2.strokeStyle = '#e53935';
    g2.setLineDash([6, 4]);
    g2.lineWidth = 1.5;
    g2.beginPath();
    g2.arc(px(player.x), pz(player.z), world.radius * grid.scale, 0, 2 * Math.PI);
    g2.stroke();
    g2.setLineDash([]);
  }
  // Entities.
  for (const [id, e] of Object.entries(world.entities)) {
    const isPlayer = Number(id) === world.player;
    g2.fillStyle = hex(e.color);
    g2.beginPath();
    g2.arc(px(e.x), pz(e.z), isPlayer ? 9 : 6, 0, 2 * Math.PI);
    g2.fill();
    if (isPlayer) {
      g2.strokeStyle = '#000';
      g2.lineWidth = 2;
      g2.stroke();
    }
  }
}

start().catch(fail);
