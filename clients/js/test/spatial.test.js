// The spatial and entity requests and events (channeld-protocol.md §1.6, §4) through the
// client's real send and receive paths (fake transport), byte for byte. The expected bytes are
// worked out by hand from the field numbers (the doubles: -1500 = c0 97 70 00.. and 2500 =
// 40 a3 88 00.. in IEEE 754, written little-endian).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  ChanqClient,
  ChannelType,
  EntityGroupType,
  MessageType,
  TypeRegistry,
  dampingIntervalMs,
  encodeFrame,
  encodePacket,
  spatialQuery,
} from '../src/index.js';
import worldDescriptor from '../gen/world.js';
import { fakeTransport, hex, tick, toHex } from './helpers.js';

const X_MINUS_1500 = '00 00 00 00 00 70 97 c0';
const R_2500 = '00 00 00 00 00 88 a3 40';

async function connected() {
  const registry = new TypeRegistry().add(worldDescriptor);
  const c = new ChanqClient({ registry, rpcTimeoutMs: 0 });
  const t = fakeTransport();
  await c.connect('fake://', { transport: t });
  return { c, t };
}

function reply(c, msgType, stubId, name, value, channelId = 0) {
  return encodeFrame(encodePacket([{ channelId, msgType, stubId, msgBody: c.registry.encode(`channeldpb.${name}`, value) }]));
}

test('QUERY_SPATIAL_CHANNEL request bytes; the reply resolves with the ids in order', async () => {
  const { c, t } = await connected();
  const p = c.querySpatialChannel([{ x: -1500, y: 0, z: 0 }, { x: 9999 }]);
  await tick();
  // MessagePack{stub 1, type 11, QuerySpatialChannelMessage{[SpatialInfo{x -1500}], [SpatialInfo{x 9999}]}}
  // 9999 = 0x40c3878000000000.
  assert.equal(toHex(t.sent[0]), toHex(hex(
    `43 48 00 1e 00 0a 1c 18 01 20 0b 2a 16 0a 09 09 ${X_MINUS_1500} 0a 09 09 00 00 00 00 80 87 c3 40`)));
  t.feed(reply(c, 11, 1, 'QuerySpatialChannelResultMessage', { channelId: [65536, 0] }));
  assert.deepEqual(await p, [65536, 0]);
});

test('UPDATE_SPATIAL_INTEREST with a sphere, for another connection, on GLOBAL', async () => {
  const { c, t } = await connected();
  c.updateSpatialInterest(5, { sphere: { center: { x: -1500, y: 0, z: 0 }, radius: 2500 } });
  await tick();
  // UpdateSpatialInterestMessage{connId 5, query{sphereAOI{center{x -1500}, radius 2500}}}
  assert.equal(toHex(t.sent[0]), toHex(hex(
    `43 48 00 20 00 0a 1e 20 0e 2a 1a 08 05 12 16 1a 14 0a 09 09 ${X_MINUS_1500} 11 ${R_2500}`)));
});

test('every AOI shape maps to its SpatialInterestQuery field; a raw query passes through', () => {
  const q = spatialQuery({
    spots: [{ x: 1, dist: 2 }, { z: 3 }],
    box: { center: { x: 1 }, extent: { x: 2, z: 2 } },
    sphere: { center: {}, radius: 5 },
    cone: { center: { x: 1 }, direction: { x: 1 }, angle: 0.5, radius: 7 },
  });
  assert.deepEqual(q, {
    spotsAOI: { spots: [{ x: 1 }, { z: 3 }], dists: [2, 0] },
    boxAOI: { center: { x: 1 }, extent: { x: 2, z: 2 } },
    sphereAOI: { center: {}, radius: 5 },
    coneAOI: { center: { x: 1 }, direction: { x: 1 }, angle: 0.5, radius: 7 },
  });
  // Spots without any dist send no dists; a missing centre stays absent (chanqd rejects it).
  assert.deepEqual(spatialQuery({ spots: [{ x: 1 }] }), { spotsAOI: { spots: [{ x: 1 }], dists: [] } });
  assert.deepEqual(spatialQuery({ sphere: { radius: 1 } }), { sphereAOI: { center: undefined, radius: 1 } });
  const raw = { boxAOI: { center: {}, extent: { x: 1 } } };
  assert.equal(spatialQuery(raw), raw);
  const r = new TypeRegistry();
  // SpatialInterestQuery{spotsAOI{spots[{x 1}], dists[2, 0]}}: 1.0 = 3f f0 00..; dists packed.
  assert.equal(toHex(r.encode('channeldpb.SpatialInterestQuery', spatialQuery({ spots: [{ x: 1, dist: 2 }, { x: 1 }] }))),
    toHex(hex('0a 1a 0a 09 09 00 00 00 00 00 00 f0 3f 0a 09 09 00 00 00 00 00 00 f0 3f 12 02 02 00')));
});

test('CREATE_ENTITY_CHANNEL on a cell: request bytes, reply under msgType 15', async () => {
  const { c, t } = await connected();
  const events = [];
  c.on('entityChannelCreated', (e) => events.push(e));
  const p = c.createEntityChannel(524288, null, { channelId: 65536 });
  await tick();
  // MessagePack{channelId 65536, stub 1, type 15, CreateEntityChannelMessage{entityId 0x80000}}
  assert.equal(toHex(t.sent[0]), toHex(hex('43 48 00 10 00 0a 0e 08 80 80 04 18 01 20 0f 2a 04 08 80 80 20')));
  t.feed(reply(c, 15, 1, 'CreateChannelResultMessage',
    { channelType: ChannelType.ENTITY, ownerConnId: 3, channelId: 524288 }, 65536));
  const res = await p;
  assert.deepEqual({ ...res }, { channelType: 5, metadata: '', ownerConnId: 3, channelId: 524288 });
  assert.equal(events.length, 1);
  assert.equal(events[0].requestChannelId, 65536);
});

test('ENTITY_GROUP_ADD and ENTITY_GROUP_REMOVE go to the entity channel, ids packed', async () => {
  const { c, t } = await connected();
  c.addEntityGroup(524288, EntityGroupType.LOCK, [524288, 524289]);
  c.removeEntityGroup(524288, EntityGroupType.HANDOVER, [524289]);
  await tick();
  assert.equal(t.sent.length, 1, 'one packet');
  assert.equal(toHex(t.sent[0]), toHex(hex('43 48 00 23 00 ' +
    '0a 12 08 80 80 20 20 10 2a 0a 08 01 12 06 80 80 20 81 80 20 ' +
    '0a 0d 08 80 80 20 20 11 2a 05 12 03 81 80 20')));
});

test('CREATE_SPATIAL_CHANNEL resolves with the cells; the regions update that reuses the stub does not resolve a later request', async () => {
  const { c, t } = await connected();
  const regionsEvents = [];
  c.on('spatialRegions', (e) => regionsEvents.push(e));
  const created = [];
  c.on('spatialChannelsCreated', (e) => created.push(e));
  const p = c.createSpatialChannels('world', null, { subOptions: { dataAccess: 2 } });
  await tick();
  // MessagePack{stub 1, type 10, CreateChannelMessage{SPATIAL, "world", subOptions{WRITE}}}
  assert.equal(toHex(t.sent[0]), toHex(hex('43 48 00 15 00 0a 13 18 01 20 0a 2a 0d 08 04 12 05 "world" 1a 02 08 02')));
  t.feed(reply(c, 10, 1, 'CreateSpatialChannelsResultMessage',
    { spatialChannelId: [65536, 65537], metadata: 'world', ownerConnId: 1 }));
  const res = await p;
  assert.deepEqual(res.spatialChannelId, [65536, 65537]);
  assert.equal(created.length, 1);

  // §4.3: SPATIAL_REGIONS_UPDATE comes last with the create's stub. A new request has taken
  // stub 1 meanwhile; the regions must not answer it.
  const q = c.querySpatialChannel([{ x: -1500 }]);
  await tick();
  assert.equal(decodeStub(t.sent[1]), 1);
  const region = { min: { x: -2000, y: -1.7014117331926443e38, z: -500 }, max: { x: -1000, y: 1.7014117331926443e38, z: 500 },
    channelId: 65536, serverIndex: 0 };
  t.feed(reply(c, 13, 1, 'SpatialRegionsUpdateMessage', { regions: [region] }));
  assert.equal(regionsEvents.length, 1);
  assert.equal(regionsEvents[0].regions[0].channelId, 65536);
  assert.equal(regionsEvents[0].regions[0].min.y, -1.7014117331926443e38);
  t.feed(reply(c, 11, 1, 'QuerySpatialChannelResultMessage', { channelId: [65536] }));
  assert.deepEqual(await q, [65536]);
});

function decodeStub(frame) {
  // 43 48 len len 00 0a n 18 stub ... (channelId 0 is left out)
  assert.equal(frame[7], 0x18);
  return frame[8];
}

test('DEBUG_GET_SPATIAL_REGIONS: empty body, answered under msgType 13', async () => {
  const { c, t } = await connected();
  const p = c.debugGetSpatialRegions();
  await tick();
  assert.equal(toHex(t.sent[0]), toHex(hex('43 48 00 06 00 0a 04 18 01 20 63')));
  // A reply of another type with the stub (a stray) is not the answer.
  t.feed(reply(c, 99, 1, 'DebugGetSpatialRegionsMessage', {}));
  t.feed(reply(c, 13, 1, 'SpatialRegionsUpdateMessage', {
    regions: [{ channelId: 65536, serverIndex: 0 }, { channelId: 65537, serverIndex: 1 }],
  }));
  const regions = await p;
  assert.deepEqual(regions.map((r) => [r.channelId, r.serverIndex]), [[65536, 0], [65537, 1]]);
});

test('SPATIAL_CHANNELS_READY is an event with the server count', async () => {
  const { c, t } = await connected();
  const got = [];
  c.on('spatialChannelsReady', (e) => got.push(e));
  t.feed(hex('43 48 00 0a 00 0a 08 20 12 2a 04 08 02 10 02'));
  assert.deepEqual(got, [{ serverIndex: 2, serverCount: 2 }]);
});

// CHANNEL_DATA_HANDOVER{src 65537, dst 65538, data Any(chanqworld.SpatialChannelData{
//   entities {524288: {objRef {netId 524288}, entityData Any(EntityChannelData{name "a"})}}})}
const HANDOVER = hex('43 48 00 92 00 0a 8f 01 08 82 80 04 20 0c 2a 86 01 ' +
  '08 81 80 04 10 82 80 04 22 7c ' +
  '0a 31 "type.googleapis.com/chanqworld.SpatialChannelData" 12 47 ' +
  '0a 45 08 80 80 20 12 3f ' +
  '0a 04 08 80 80 20 1a 37 0a 30 "type.googleapis.com/chanqworld.EntityChannelData" 12 03 12 01 61');

test('CHANNEL_DATA_HANDOVER decodes, nested entity data included', async () => {
  const { c, t } = await connected();
  const got = [];
  c.on('handover', (e) => got.push(e));
  t.feed(HANDOVER);
  assert.equal(got.length, 1);
  const h = got[0];
  assert.deepEqual([h.channelId, h.srcChannelId, h.dstChannelId, h.contextConnId], [65538, 65537, 65538, 0]);
  assert.equal(h.typeName, 'chanqworld.SpatialChannelData');
  assert.deepEqual(Object.keys(h.data.entities), ['524288']);
  const st = h.data.entities['524288'];
  assert.equal(st.objRef.netId, 524288);
  assert.equal(st.removed, false);
  assert.equal(st.entityData.typeName, 'chanqworld.EntityChannelData');
  assert.equal(st.entityData.data.name, 'a');
  assert.equal(toHex(st.entityData.value), '12 01 61');
});

test('handover data of an unregistered type is delivered raw', async () => {
  const c = new ChanqClient({ rpcTimeoutMs: 0 });
  const t = fakeTransport();
  await c.connect('fake://', { transport: t });
  const got = [];
  c.on('handover', (e) => got.push(e));
  t.feed(HANDOVER);
  assert.equal(got[0].data, null);
  assert.equal(got[0].typeName, 'chanqworld.SpatialChannelData');
  assert.equal(got[0].any.value.length, 71);
});

test('spatialSubscriptions: the SPATIAL cells and their damping, kept by SUB/UNSUB results', async () => {
  const { c, t } = await connected();
  c.connId = 7;
  const sub = (ch, type, ms) => reply(c, 6, 0, 'SubscribedToChannelResultMessage',
    { connId: 7, subOptions: { dataAccess: 1, fanOutIntervalMs: ms }, connType: 2, channelType: type }, ch);
  t.feed(sub(65536, ChannelType.SPATIAL, 20));
  t.feed(sub(65537, ChannelType.SPATIAL, 50));
  t.feed(sub(65538, ChannelType.SPATIAL, 100));
  t.feed(sub(524288, ChannelType.ENTITY, 20));
  t.feed(reply(c, 7, 0, 'UnsubscribedFromChannelResultMessage', { connId: 7, connType: 2, channelType: 4 }, 65538));
  const m = c.spatialSubscriptions();
  assert.deepEqual([...m].map(([id, o]) => [id, o.fanOutIntervalMs]), [[65536, 20], [65537, 50]]);
  assert.equal(c.subscriptions.size, 3);
});

test('damping intervals: 0 -> 20, 1 -> 50, 2 -> 100, farther -> the default', () => {
  assert.deepEqual([0, 1, 2, 3, 9].map((d) => dampingIntervalMs(d, 33)), [20, 50, 100, 33, 33]);
  assert.equal(MessageType.CHANNEL_DATA_HANDOVER, 12);
});
