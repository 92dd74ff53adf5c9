// The chat-rooms demo: one page, one chanqd connection over ws(s) to the page's own origin.
// Every room is a channel whose data is a chatpb.ChatChannelData; a message is a
// CHANNEL_DATA_UPDATE holding one ChatMessage, which chanqd appends to the room's list (trimmed
// to the last listSizeLimit messages) and fans out to the subscribers every 100 ms.
//   Lobby  = GLOBAL (channel 0)
//   rooms  = SUBWORLD channels created by a page, metadata = the room name
// Announcements: chanqd's bridge delivers each message of the durable topic "announcements" to
// GLOBAL as a user-space message of type 200 whose body is a chanqpb.TopicEvent
// (config/demo_bridge.json, doc/bridge.md); the page is subscribed to GLOBAL (the Lobby), and
// shows those whose content is text in its Announcements panel, newest last. A TopicTracker
// decides which events the panel shows; its positions are kept in localStorage, per nickname, so
// that a reloaded page resumes (TopicResumeMessage after its SUB to GLOBAL) and shows what it
// missed, once, in order.
// Query parameters: ?ws=URL connects elsewhere; ?possess=0 never takes ownership of GLOBAL.
import {
  ChanqClient,
  ChannelDataAccess,
  ChannelType,
  MessageType,
  TOPIC_RESUME_RESULT,
  TopicTracker,
  TypeRegistry,
  decodeTopicEvent,
} from '../src/index.js';
import chatDescriptor from '../gen/chat.js';

const CHAT = 'chatpb.ChatChannelData';
const LIST_SIZE_LIMIT = 100;
const MERGE_OPTIONS = { listSizeLimit: LIST_SIZE_LIMIT, truncateTop: true };
// Own messages come back through the fan-out, so the page shows exactly what chanqd merged.
const SUB_OPTIONS = { dataAccess: ChannelDataAccess.WRITE_ACCESS, fanOutIntervalMs: 100, skipSelfUpdateFanOut: false };
const LOBBY = 0;
const ROOM_REFRESH_MS = 5000;
const ANNOUNCEMENT_MSG_TYPE = 200; // the binding's msg_type in config/demo_bridge.json
const ANNOUNCEMENTS_MAX = 100;
const TOPICS_STORAGE = 'chanq-demo:topics:'; // + the nickname: the tracker's toJSON()

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);

const state = {
  client: null,
  nick: '',
  current: LOBBY,
  rooms: new Map([[LOBBY, room(LOBBY, 'Lobby')]]),
  announcements: [], // {shard, offset, timeMs, text}, in arrival order
  topics: null,      // the TopicTracker of the announcements (restored at login)
  hadPositions: false, // whether it was restored with a position (a resume to report on)
};

function room(id, name) {
  return { id, name, messages: [], joined: false, fresh: false, unread: 0 };
}

function wsUrl() {
  if (params.get('ws'))
    return params.get('ws');
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/`;
}

// ---- connection -----------------------------------------------------------------------------

async function login(nick) {
  const client = new ChanqClient({ registry: new TypeRegistry().add(chatDescriptor) });
  client.on('channelData', onChannelData);
  client.on('userMessage', onAnnouncement);
  client.on('message', onResumeResult);
  client.on('channelRemoved', (e) => onRoomGone(e.channelId, 'was removed'));
  client.on('unsubscribed', (e) => e.connId === client.connId && onRoomGone(e.channelId, 'was left'));
  client.on('close', (reason) => setStatus(`disconnected: ${reason}`, 'error'));
  client.on('error', (err) => notice(err.message));
  setStatus('connecting…');
  await client.connect(wsUrl());
  const res = await client.auth(nick, 'chanq-chat');
  state.client = client;
  state.nick = nick;
  setStatus(`${nick} · conn ${res.connId}`, 'online');
  // The resume is made (and GLOBAL marked pending) before the SUB, and sent once it is answered:
  // a live event that arrives with the SUB's answer, ahead of a hole, is then left to the
  // catch-up instead of being taken as a hole that moves the position past the missed events.
  const resume = restoreTopics();
  await join(LOBBY);
  state.client.send(LOBBY, resume.msgType, resume.body);
  possessLobby();
  $('login').hidden = true;
  $('chat').hidden = false;
  $('text').focus();
  await refreshRooms();
  setInterval(() => refreshRooms().catch(() => {}), ROOM_REFRESH_MS);
}

// The Lobby needs an owner that initialised its data type and merge options. Until chanqd can
// set that up itself, the first page takes GLOBAL (no data: the first message defines it). When
// GLOBAL is already owned chanqd ignores this; when its owner left, the next page takes over.
function possessLobby() {
  if (params.get('possess') === '0')
    return;
  const body = state.client.registry.encode('channeldpb.CreateChannelMessage', {
    channelType: ChannelType.GLOBAL,
    mergeOptions: MERGE_OPTIONS,
  });
  state.client.send(LOBBY, MessageType.CREATE_CHANNEL, body);
}

// ---- rooms ----------------------------------------------------------------------------------

async function join(id) {
  const r = state.rooms.get(id);
  if (!r.joined) {
    r.fresh = true;
    await state.client.subToChannel(id, SUB_OPTIONS);
    r.joined = true;
  }
  show(id);
}

async function createRoom(name) {
  const res = await state.client.createChannel(ChannelType.SUBWORLD, name, { type: CHAT, value: {} },
    { subOptions: SUB_OPTIONS, mergeOptions: MERGE_OPTIONS });
  const r = room(res.channelId, name);
  r.joined = true;
  r.fresh = true;
  state.rooms.set(r.id, r);
  show(r.id);
}

async function refreshRooms() {
  const list = await state.client.listChannels(ChannelType.SUBWORLD);
  const alive = new Set(list.map((c) => c.channelId));
  for (const c of list) {
    if (!state.rooms.has(c.channelId))
      state.rooms.set(c.channelId, room(c.channelId, c.metadata || `room ${c.channelId}`));
  }
  for (const id of state.rooms.keys()) {
    if (id !== LOBBY && !alive.has(id) && !state.rooms.get(id).joined)
      state.rooms.delete(id);
  }
  renderRooms();
}

function onRoomGone(id, why) {
  const r = state.rooms.get(id);
  if (!r || id === LOBBY)
    return;
  state.rooms.delete(id);
  notice(`Room “${r.name}” ${why}.`);
  if (state.current === id)
    show(LOBBY);
  else
    renderRooms();
}

// ---- chat data ------------------------------------------------------------------------------

// The first fan-out after subscribing is the room's whole list; later ones hold the messages
// that arrived since the previous fan-out.
function onChannelData(e) {
  const r = state.rooms.get(e.channelId);
  if (!r || e.typeName !== CHAT || !e.data)
    return;
  const incoming = e.data.chatMessages;
  r.messages = r.fresh ? incoming : r.messages.concat(incoming);
  r.fresh = false;
  if (r.messages.length > LIST_SIZE_LIMIT)
    r.messages = r.messages.slice(-LIST_SIZE_LIMIT);
  if (e.channelId === state.current)
    renderMessages();
  else {
    r.unread += incoming.length;
    renderRooms();
  }
}

function sendMessage(content) {
  const id = state.current;
  if (id === LOBBY)
    possessLobby();
  state.client.updateChannelData(id, {
    type: CHAT,
    value: { chatMessages: [{ sender: state.nick, sendTime: Date.now(), content }] },
  });
}

// ---- announcements --------------------------------------------------------------------------

// The tracker of state.nick from localStorage (a new one when there is none, or it does not
// load); returns its resume of GLOBAL, GLOBAL marked pending. With no position the server
// answers with the live ones (no replay), which are stored: a page that saw no event still
// resumes from where it opened.
function restoreTopics() {
  const key = TOPICS_STORAGE + state.nick;
  state.topics = new TopicTracker();
  try {
    const saved = localStorage.getItem(key);
    if (saved !== null)
      state.topics = TopicTracker.fromJSON(JSON.parse(saved));
  } catch (err) {
    notice(`The stored announcement positions were dropped: ${err.message}`);
    try {
      localStorage.removeItem(key);
    } catch {
      // storage disabled: nothing is stored either
    }
  }
  state.hadPositions = state.topics.stats().positions > 0;
  return state.topics.resumeMessage(LOBBY);
}

function saveTopics() {
  try {
    localStorage.setItem(TOPICS_STORAGE + state.nick, JSON.stringify(state.topics));
  } catch {
    // storage full or disabled: the page works, a reload just does not resume
  }
}

// The resume's result (type 91, on GLOBAL, the body itself). Not recovered: the events since
// the stored position are lost (another epoch, purged, or no bridge now), which the panel says
// when there was a position to recover from; delivery goes on from the result's positions.
function onResumeResult(m) {
  if (m.channelId !== LOBBY || m.msgType !== TOPIC_RESUME_RESULT || !state.topics)
    return;
  let r;
  try {
    r = state.topics.onResult(LOBBY, m.msgBody);
  } catch (err) {
    notice(`The announcements' resume result could not be read: ${err.message}`);
    return;
  }
  saveTopics();
  if (!r.recovered && state.hadPositions)
    announcementsNotice(`some announcements could not be recovered: ${r.error}`);
}

function announcementsNotice(text) {
  const p = $('announcements-notice');
  p.textContent = text;
  p.hidden = false;
}

// A bridge delivery reaches a client as a server's broadcast does: the TopicEvent is the
// userMessage's payload. The tracker drops a duplicate, and while the resume is pending an
// event past a hole (the catch-up brings the missed ones first).
function onAnnouncement(m) {
  if (m.channelId !== LOBBY || m.msgType !== ANNOUNCEMENT_MSG_TYPE)
    return;
  let ev;
  try {
    ev = decodeTopicEvent(m.payload);
  } catch (err) {
    notice(`An announcement could not be read: ${err.message}`);
    return;
  }
  let accepted;
  try {
    accepted = state.topics.accept(m.channelId, ev);
  } catch (err) {
    notice(`An announcement was dropped: ${err.message}`);
    return;
  }
  if (!accepted)
    return;
  saveTopics();
  const text = announcementText(ev.content);
  if (text === null)
    return;
  state.announcements.push({ shard: ev.shard, offset: ev.offset, timeMs: ev.timeMs, text });
  if (state.announcements.length > ANNOUNCEMENTS_MAX)
    state.announcements = state.announcements.slice(-ANNOUNCEMENTS_MAX);
  renderAnnouncements();
}

// The text an announcement shows: its content as UTF-8 (null when it is not: binary content is
// not shown), or the "text" field of content that is a JSON object with one (as produced with
// {"content": {"text": "..."}} over the HTTP API).
function announcementText(content) {
  let s;
  try {
    s = new TextDecoder('utf-8', { fatal: true }).decode(content);
  } catch {
    return null;
  }
  try {
    const j = JSON.parse(s);
    if (j && typeof j === 'object' && typeof j.text === 'string')
      return j.text;
  } catch {
    // not JSON: the text as it is
  }
  return s;
}

// ---- rendering ------------------------------------------------------------------------------

// Text only (textContent): an announcement is never parsed as HTML.
function renderAnnouncements() {
  const ul = $('announcements');
  ul.replaceChildren(...state.announcements.map((a) => {
    const li = el('li');
    li.dataset.offset = String(a.offset);
    li.append(el('span', 'time', new Date(a.timeMs).toLocaleTimeString()), el('span', 'content', a.text));
    return li;
  }));
  ul.scrollTop = ul.scrollHeight;
}

function show(id) {
  state.current = id;
  const r = state.rooms.get(id);
  r.unread = 0;
  $('room-title').textContent = r.name;
  renderRooms();
  renderMessages();
}

function renderRooms() {
  const ul = $('rooms');
  ul.replaceChildren(...[...state.rooms.values()].map((r) => {
    const li = el('li', r.id === state.current ? 'current' : '', r.name);
    li.dataset.channel = String(r.id);
    if (r.unread)
      li.append(el('span', 'unread', String(r.unread)));
    li.addEventListener('click', () => join(r.id).catch((err) => notice(err.message)));
    return li;
  }));
}

function renderMessages() {
  const ul = $('messages');
  const r = state.rooms.get(state.current);
  ul.replaceChildren(...r.messages.map((m) => {
    const li = el('li', m.sender === state.nick ? 'mine' : '');
    li.append(el('span', 'time', new Date(Number(m.sendTime)).toLocaleTimeString()),
      el('span', 'sender', m.sender), el('span', 'content', m.content));
    return li;
  }));
  ul.scrollTop = ul.scrollHeight;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls)
    e.className = cls;
  if (text !== undefined)
    e.textContent = text;
  return e;
}

function setStatus(text, cls = '') {
  const s = $('status');
  s.textContent = text;
  s.className = `status ${cls}`;
}

function notice(text) {
  $('notice').textContent = text;
}

// ---- forms ----------------------------------------------------------------------------------

function onSubmit(id, fn) {
  $(id).addEventListener('submit', (ev) => {
    ev.preventDefault();
    Promise.resolve(fn()).catch((err) => notice(err.message));
  });
}

onSubmit('login', async () => {
  const nick = $('nick').value.trim();
  if (nick)
    await login(nick);
});

onSubmit('compose', () => {
  const text = $('text').value.trim();
  if (!text)
    return;
  sendMessage(text);
  $('text').value = '';
});

onSubmit('new-room', async () => {
  const name = $('room-name').value.trim();
  if (!name)
    return;
  await createRoom(name);
  $('room-name').value = '';
});

$('refresh').addEventListener('click', () => refreshRooms().catch((err) => notice(err.message)));
