// Integration: the spatial API against a real chanqd (env CHANQD; skipped when unset) with --dev
// and the 4x1 layout (channeld-protocol.md §4.1-§4.5): two SERVER connections over TCP take the
// two server slots, the last one sees §4.3's order of messages; regions, queries and an entity
// channel come back with the ids of the grid math.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ChannelType, ChanqClient, MessageType as MT, TypeRegistry } from '../src/index.js';
import worldDescriptor from '../gen/world.js';
import { chanqdHelp, hasFlag, startChanqd } from './server.js';

const BIN = process.env.CHANQD;
const skip = !BIN ? 'CHANQD is not set' : !hasFlag(chanqdHelp(BIN), 'spatial-settings') ? 'no --spatial-settings' : false;

describe('spatial channels on chanqd (4x1)', { skip }, () => {
  let srv;
  const clients = [];

  before(async () => {
    srv = await startChanqd(BIN, ['--dev', '--spatial-settings', '4x1']);
  });

  after(async () => {
    for (const c of clients)
      c.disconnect();
    await srv?.stop();
  });

  async function server(pit) {
    const c = new ChanqClient({ registry: new TypeRegistry().add(worldDescriptor), rpcTimeoutMs: 10000 });
    clients.push(c);
    await c.connect(`tcp://${srv.ready.server}`);
    await c.auth(pit, '');
    return c;
  }

  test('two servers fill the slots; the last sees border SUBs, READY, result, SUBs, regions', async () => {
    const s0 = await server('s0');
    const r0 = await s0.createSpatialChannels('w');
    assert.deepEqual(r0.spatialChannelId, [65536, 65537]);
    assert.equal(r0.ownerConnId, s0.connId);

    const s1 = await server('s1');
    const seen = [];
    s1.on('message', (m) => seen.push([m.msgType, m.channelId, m.stubId]));
    const ready0 = s0.waitFor('spatialChannelsReady');
    const regions = s1.waitFor('spatialRegions');
    const r1 = await s1.createSpatialChannels('w');
    assert.deepEqual(r1.spatialChannelId, [65538, 65539]);
    const reg = await regions;
    assert.deepEqual(await ready0, { serverIndex: 2, serverCount: 2 });
    // §4.3 step 4 then step 5; the regions update echoes the stub (no other GLOBAL owner).
    assert.deepEqual(seen, [
      [MT.SUB_TO_CHANNEL, 65537, 0],
      [MT.SPATIAL_CHANNELS_READY, 0, 0],
      [MT.CREATE_SPATIAL_CHANNEL, 0, 1],
      [MT.SUB_TO_CHANNEL, 65538, 0],
      [MT.SUB_TO_CHANNEL, 65539, 0],
      [MT.SPATIAL_REGIONS_UPDATE, 0, 1],
    ]);
    assert.deepEqual(reg.regions.map((r) => [r.channelId, r.serverIndex, r.min.x, r.min.z, r.max.x, r.max.z]), [
      [65536, 0, -2000, -500, -1000, 500],
      [65537, 0, -1000, -500, 0, 500],
      [65538, 1, 0, -500, 1000, 500],
      [65539, 1, 1000, -500, 2000, 500],
    ]);
    // §4.2: exactly -3.40282347e38 / 2 (channeld's decimal literal, not FLT_MAX / 2).
    assert.equal(reg.regions[0].min.y, -3.40282347e38 / 2);

    // QUERY_SPATIAL_CHANNEL: §4.2's cells, 0 off the grid.
    assert.deepEqual(await s0.querySpatialChannel([{ x: -1500 }, { x: 1999, z: 499 }, { x: 2000 }, { x: -2000, z: -500 }]),
      [65536, 65539, 0, 65536]);

    // DEBUG_GET_SPATIAL_REGIONS (--dev) gives the same regions.
    const dbg = await s1.debugGetSpatialRegions();
    assert.deepEqual(dbg.map((r) => r.channelId), [65536, 65537, 65538, 65539]);

    // An entity channel created on a cell: the reply comes under 15 on that cell's id.
    const created = s0.waitFor('entityChannelCreated');
    const e = await s0.createEntityChannel(0x80000, { type: 'chanqworld.EntityChannelData', value: { name: 'e' } },
      { channelId: 65536, metadata: 'e1' });
    assert.deepEqual({ ...e }, { channelType: ChannelType.ENTITY, metadata: 'e1', ownerConnId: s0.connId, channelId: 0x80000 });
    assert.equal((await created).requestChannelId, 65536);
  });
});
