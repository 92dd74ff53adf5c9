#!/usr/bin/env node
// The world bots: the game-server side of the browser world (clients/js/world/), in Node with
// the JS client. They run
//   - 2 spatial servers (SERVER connections; every server slot of the layout, 4x1: 2), each
//     owning its slot's cells (CREATE_SPATIAL_CHANNEL with chanqworld.SpatialChannelData);
//   - N wandering entities: entity channels (CREATE_ENTITY_CHANNEL on the cell where each
//     starts, chanqworld.EntityChannelData), moved every tick by a CHANNEL_DATA_UPDATE from the
//     entity's current owner. chanqd hands an entity over when an update moves it into another
//     cell (doc/spatial.md); the bots follow the ownership from the CHANNEL_DATA_HANDOVER
//     messages their servers receive (the entities in its data, or failing that the entities
//     now in the destination cell), so a cross-server handover switches the sending connection;
//   - one "player": entity 0. Server 0 possesses GLOBAL. A page says hello with a user message
//     (type 200) on GLOBAL, which chanqd forwards to the GLOBAL owner with the page's connId
//     (ServerForwardMessage.clientConnId); server 0 answers (type 201, JSON {player, radius})
//     and from then on sends UPDATE_SPATIAL_INTEREST (a sphere of `radius` around the player)
//     for that connId whenever the player changes cell, and once a second.
// Usage: node bots.mjs [--url tcp://127.0.0.1:11288] [--entities 8] [--tick-ms 100]
//        [--speed 250] [--radius 2500] [--player-at X,Z] [--seed 1] [--entity-start 524288]
// --player-at pins the player at (X, 0, Z), so the interest (and its damping) stays fixed.
import { BroadcastType, ChannelDataAccess, ChannelType, ChanqClient, TypeRegistry } from '../src/index.js';
import worldDescriptor from '../gen/world.js';

export const HELLO = 200;
export const WELCOME = 201;
const ENTITY = 'chanqworld.EntityChannelData';
const CELL = 'chanqworld.SpatialChannelData';
const TRAIL_LIMIT = 16;
const COLORS = [0xe6194b, 0x3cb44b, 0x4363d8, 0xf58231, 0x911eb4, 0x42d4f4, 0xf032e6, 0xbfef45,
  0x9a6324, 0x800000, 0x469990, 0x000075];

// A small deterministic PRNG (mulberry32), so a seed reproduces a run's walks.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The grid from SPATIAL_REGIONS_UPDATE regions: bounds, cell size, cols, cell -> server. */
export function gridOf(regions) {
  const g = { minX: Infinity, minZ: Infinity, maxX: -Infinity, maxZ: -Infinity, cells: new Map() };
  for (const r of regions) {
    g.minX = Math.min(g.minX, r.min.x);
    g.minZ = Math.min(g.minZ, r.min.z);
    g.maxX = Math.max(g.maxX, r.max.x);
    g.maxZ = Math.max(g.maxZ, r.max.z);
    g.cells.set(r.channelId, r);
  }
  const r0 = regions[0];
  g.w = r0.max.x - r0.min.x;
  g.h = r0.max.z - r0.min.z;
  g.cols = Math.round((g.maxX - g.minX) / g.w);
  g.start = Math.min(...regions.map((r) => r.channelId));
  g.cellOf = (x, z) => g.start + Math.floor((x - g.minX) / g.w) + Math.floor((z - g.minZ) / g.h) * g.cols;
  g.serverOf = (cell) => g.cells.get(cell)?.serverIndex ?? -1;
  return g;
}

function parseArgs(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(argv[i]);
    if (!m)
      throw new Error(`unexpected argument ${argv[i]}`);
    o[m[1]] = m[2] ?? argv[++i];
  }
  return o;
}

/**
 * Starts the bots against chanqd's server listener. Resolves, once every entity exists, with
 * {state, stop()}: state has servers [{client, cells}], entities Map id -> {x, z, owner, seq},
 * handovers [{server, src, dst, ids}], viewers Set, grid, player, interestsSent.
 */
export async function runBots(opts = {}) {
  const url = opts.url || 'tcp://127.0.0.1:11288';
  const n = opts.entities ?? 8;
  const tickMs = opts.tickMs ?? 100;
  const speed = opts.speed ?? 250;
  const radius = opts.radius ?? 2500;
  const entityStart = opts.entityStart ?? 0x80000;
  const rand = rng(opts.seed ?? 1);
  const log = opts.log || (() => {});
  const registry = new TypeRegistry().add(worldDescriptor);
  const state = { servers: [], entities: new Map(), handovers: [], viewers: new Set(), grid: null,
    player: entityStart, interestsSent: 0, errors: [] };
  let timer = null;
  let interestTimer = null;
  let stopped = false;

  const stop = () => {
    stopped = true;
    clearInterval(timer);
    clearInterval(interestTimer);
    for (const s of state.servers)
      s.client.disconnect();
  };

  try {
    // Every slot of the layout, one connection each; the last create fills the grid.
    let regions = null;
    let count = 0;
    for (let i = 0; ; i++) {
      const client = new ChanqClient({ registry });
      client.on('error', (err) => state.errors.push(String(err.message || err)));
      client.on('spatialChannelsReady', (e) => {
        count = e.serverCount;
      });
      client.on('spatialRegions', (e) => {
        regions = e.regions;
      });
      await client.connect(url);
      await client.auth(`world-bot-${i}`, 'world');
      const res = await client.createSpatialChannels('world', { type: CELL, value: {} },
        { subOptions: { dataAccess: ChannelDataAccess.WRITE_ACCESS } });
      state.servers.push({ client, index: i, cells: res.spatialChannelId });
      log(`server ${i}: conn ${client.connId}, cells ${res.spatialChannelId.join(' ')}`);
      if (count > 0 || i >= 63)
        break;
    }
    // SPATIAL_REGIONS_UPDATE ends the last create (§4.3), maybe in a later read than its reply.
    if (!regions) {
      const last = state.servers[state.servers.length - 1].client;
      regions = (await last.waitFor('spatialRegions', () => true, 10000)).regions;
    }
    state.grid = gridOf(regions);
    const g = state.grid;
    const byIndex = (k) => state.servers[k];

    // Server 0 is the GLOBAL owner: pages say hello to it.
    const s0 = byIndex(0).client;
    await s0.createChannel(ChannelType.GLOBAL, 'world');
    s0.on('userMessage', (m) => {
      if (m.channelId !== 0 || m.msgType !== HELLO || !m.clientConnId)
        return;
      state.viewers.add(m.clientConnId);
      s0.sendForward(0, BroadcastType.SINGLE_CONNECTION, WELCOME, m.clientConnId,
        JSON.stringify({ player: state.player, radius, entities: n }));
      sendInterest(m.clientConnId);
      log(`viewer ${m.clientConnId} joined`);
    });

    for (const s of state.servers)
      s.client.on('handover', (h) => onHandover(s.index, h));

    // The entities, each created by the owner of the cell it starts in, on that cell.
    const margin = 50;
    for (let i = 0; i < n; i++) {
      const id = entityStart + i;
      let x = g.minX + margin + rand() * (g.maxX - g.minX - 2 * margin);
      let z = g.minZ + margin + rand() * (g.maxZ - g.minZ - 2 * margin);
      if (i === 0 && opts.playerAt)
        [x, z] = opts.playerAt;
      const cell = g.cellOf(x, z);
      const owner = g.serverOf(cell);
      const e = { id, x, z, owner, seq: 0, heading: rand() * 2 * Math.PI, color: COLORS[i % COLORS.length],
        pinned: i === 0 && !!opts.playerAt, cell };
      state.entities.set(id, e);
      const c = byIndex(owner).client;
      await c.createEntityChannel(id, { type: ENTITY, value: entityValue(e, true) }, {
        channelId: cell,
        metadata: i === 0 ? 'player' : `bot ${i}`,
        subOptions: { dataAccess: ChannelDataAccess.WRITE_ACCESS },
        mergeOptions: { listSizeLimit: TRAIL_LIMIT, truncateTop: true },
      });
      // As a game server does on spawn: the cell's data lists the entity.
      c.updateChannelData(cell, { type: CELL, value: { entities: { [id]: { objRef: { netId: id, owningConnId: c.connId } } } } });
    }
    log(`${n} entities from ${entityStart}`);

    timer = setInterval(tick, tickMs);
    interestTimer = setInterval(() => {
      for (const v of state.viewers)
        sendInterest(v);
    }, 1000);
    return { state, stop };
  } catch (err) {
    stop();
    throw err;
  }

  function entityValue(e, full) {
    const v = { transform: { position: { x: e.x, z: e.z } }, seq: e.seq, trail: [e.seq] };
    if (full) {
      v.name = e.id === state.player ? 'player' : `bot ${e.id - entityStart}`;
      v.color = e.color;
    }
    return v;
  }

  function sendInterest(connId) {
    const p = state.entities.get(state.player);
    if (!p || stopped)
      return;
    state.servers[0].client.updateSpatialInterest(connId, { sphere: { center: { x: p.x, z: p.z }, radius } });
    state.interestsSent++;
  }

  function tick() {
    const g = state.grid;
    const step = (speed * tickMs) / 1000;
    for (const e of state.entities.values()) {
      if (!e.pinned) {
        e.heading += (rand() - 0.5) * 0.6;
        let x = e.x + Math.cos(e.heading) * step;
        let z = e.z + Math.sin(e.heading) * step;
        // Bounce off the world's edge (a step off the grid would be an off-grid position).
        if (x < g.minX + 1 || x > g.maxX - 1) {
          e.heading = Math.PI - e.heading;
          x = Math.min(Math.max(x, g.minX + 1), g.maxX - 1);
        }
        if (z < g.minZ + 1 || z > g.maxZ - 1) {
          e.heading = -e.heading;
          z = Math.min(Math.max(z, g.minZ + 1), g.maxZ - 1);
        }
        e.x = x;
        e.z = z;
      }
      e.seq++;
      const conn = state.servers[e.owner]?.client;
      if (!conn?.connected)
        continue;
      conn.updateChannelData(e.id, { type: ENTITY, value: entityValue(e, false) });
      const cell = g.cellOf(e.x, e.z);
      if (cell !== e.cell) {
        e.cell = cell;
        if (e.id === state.player)
          state.viewers.forEach(sendInterest);
      }
    }
  }

  function onHandover(server, h) {
    const g = state.grid;
    const dstServer = g.serverOf(h.dstChannelId);
    let ids = h.data?.entities ? Object.keys(h.data.entities).map(Number) : [];
    if (!ids.length) {
      ids = [...state.entities.values()].filter((e) => g.cellOf(e.x, e.z) === h.dstChannelId).map((e) => e.id);
    }
    state.handovers.push({ server, src: h.srcChannelId, dst: h.dstChannelId, ids });
    if (server !== dstServer)
      return;
    for (const id of ids) {
      const e = state.entities.get(id);
      if (e && e.owner !== dstServer) {
        log(`entity ${id}: server ${e.owner} -> ${dstServer} (${h.srcChannelId} -> ${h.dstChannelId})`);
        e.owner = dstServer;
      }
    }
  }
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const num = (k, d) => (a[k] === undefined ? d : Number(a[k]));
  const opts = {
    url: a.url,
    entities: num('entities', 8),
    tickMs: num('tick-ms', 100),
    speed: num('speed', 250),
    radius: num('radius', 2500),
    seed: num('seed', 1),
    entityStart: num('entity-start', 0x80000),
    playerAt: a['player-at'] ? a['player-at'].split(',').map(Number) : null,
    log: (s) => console.log(`world-bots: ${s}`),
  };
  const { state, stop } = await runBots(opts);
  let leaving = false;
  const bye = () => {
    leaving = true;
    stop();
    process.exit(0);
  };
  process.on('SIGINT', bye);
  process.on('SIGTERM', bye);
  for (const s of state.servers)
    s.client.on('close', (why) => {
      if (leaving)
        return;
      console.error(`world-bots: server ${s.index} closed: ${why}`);
      process.exit(1);
    });
}

if (import.meta.url === `file://${process.argv[1]}`)
  main().catch((err) => {
    console.error(`world-bots: ${err.stack || err}`);
    process.exit(1);
  });
