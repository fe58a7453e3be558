// leasehold dashboard: polls /ui/api/state, follows /ui/api/events (SSE)
// and draws a token timeline per lock name. Plain browser JavaScript, no
// build step. With auth enabled it asks for a token, keeps it in this
// tab's sessionStorage and sends it as a bearer token on every call.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = { view: null, fetchedAt: 0, events: [], byName: new Map(), tokenName: new Map(), chosen: "", viewer: null, confirming: "", kvAfter: [""] };
const MAX_EVENTS = 500;
const TOKEN_KEY = "leasehold.token";

// Refused is an answer that the token was refused or may not do this.
class Refused extends Error {}

// api calls the dashboard's JSON API with the token, if any.
async function api(path, opts) {
  const headers = Object.assign({}, (opts || {}).headers);
  const tok = sessionStorage.getItem(TOKEN_KEY);
  if (tok) headers.Authorization = "Bearer " + tok;
  const r = await fetch(path, Object.assign({ cache: "no-store" }, opts, { headers }));
  if (r.ok) return r;
  let msg = await r.text();
  try { msg = JSON.parse(msg).message || msg; } catch (e) { /* plain text */ }
  if (r.status === 403) throw new Refused(msg);
  throw new Error(msg);
}

// ---- login -----------------------------------------------------------

function showLogin(msg) {
  stopLive();
  $("#dashboard").hidden = true;
  $("#logout").hidden = true;
  $("#who").hidden = true;
  $("#login").hidden = false;
  $("#login-msg").textContent = msg || "";
  $("#token").focus();
}

// start asks who this tab is and opens the dashboard or the login.
async function start() {
  let v;
  try {
    v = await (await api("api/viewer")).json();
  } catch (e) {
    if (e instanceof Refused) {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin("Token refused: " + e.message);
    } else {
      $("#node-role").textContent = "unreachable";
      setTimeout(start, 2000);
    }
    return;
  }
  state.viewer = v;
  if (!v.view) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(v.principal ? v.principal + " may not view the dashboard: it needs the permission read (or kv-read) on some prefix, or admin." : "");
    return;
  }
  $("#login").hidden = true;
  $("#dashboard").hidden = false;
  $("#dashboard").dataset.admin = v.admin;
  $("#who").hidden = !v.auth;
  $("#who").textContent = (v.principal || "anonymous") + (v.admin ? " (admin)" : " (read-only)");
  $("#logout").hidden = !v.auth;
  $("#sessions-section").hidden = !v.admin;
  $("#cluster-section").hidden = !v.admin;
  startLive();
}

$("#login").addEventListener("submit", (e) => {
  e.preventDefault();
  const tok = $("#token").value.trim();
  if (!tok) return;
  sessionStorage.setItem(TOKEN_KEY, tok);
  $("#token").value = "";
  start();
});
$("#logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin("Logged out.");
});

// refused handles a 403 on a call: the token was revoked or the policy
// changed since the login, so ask again.
function refused(e) {
  if (!(e instanceof Refused)) return false;
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin("Refused: " + e.message);
  return true;
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function fmtMs(ms) {
  if (ms < 0) return "?";
  if (ms < 10000) return (ms / 1000).toFixed(1) + " s";
  if (ms < 120000) return Math.round(ms / 1000) + " s";
  return Math.round(ms / 60000) + " min";
}

function clock(unixMs) {
  const d = new Date(unixMs);
  return d.toTimeString().slice(0, 8) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

// ---- state -----------------------------------------------------------

let refreshing = false, again = false;
async function refresh() {
  if (refreshing) { again = true; return; }
  refreshing = true;
  try {
    const r = await api("api/state");
    state.view = await r.json();
    state.fetchedAt = performance.now();
    render();
  } catch (e) {
    if (!refused(e)) $("#node-role").textContent = "unreachable";
  } finally {
    refreshing = false;
    if (again) { again = false; refresh(); }
  }
}

// serverNow is the node's clock now (event times are the leader's).
function serverNow() {
  return state.view ? state.view.now_ms + (performance.now() - state.fetchedAt) : Date.now();
}

function left(remainingMs) {
  if (remainingMs < 0) return -1;
  return Math.max(0, remainingMs - (performance.now() - state.fetchedAt));
}

// contact describes a node's last contact with the leader.
function contact(role, ms) {
  if (role === "leader") return "(leader)";
  if (ms === -2) return "unreachable";
  if (ms < 0) return "never";
  return fmtMs(ms) + " ago";
}

// more says, under a table the view lists only part of, how much it shows.
function more(sel, truncated, shown, total, what) {
  const p = $(sel);
  p.hidden = !truncated;
  p.textContent = truncated ? "Showing the first " + shown.toLocaleString("en-US") + " of " + total.toLocaleString("en-US") + " " + what + "." : "";
}

// action is an admin button with a confirm step: the first click arms it,
// the second (on "confirm …") sends the action.
function action(key, label, run) {
  const armed = state.confirming === key;
  const b = el("button", { type: "button", class: "act" + (armed ? " confirm" : ""), "data-action": key }, armed ? "confirm " + label : label);
  b.addEventListener("click", async () => {
    if (state.confirming !== key) { state.confirming = key; render(); return; }
    state.confirming = "";
    $("#action-msg").textContent = "";
    try {
      await run();
    } catch (e) {
      if (!refused(e)) $("#action-msg").textContent = label + " failed: " + e.message;
    }
    refresh();
  });
  return b;
}

function post(path, body) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

// queueText lists a lock's waiters in order with their mode.
function queueText(q) {
  return q.map((w, i) => (i + 1) + ". " + (w.owner || (w.lease_id || "?").slice(0, 8)) + (w.mode === "shared" ? " (shared)" : " (exclusive)")).join(", ");
}

function render() {
  const v = state.view;
  const admin = state.viewer && state.viewer.admin;
  $("#node-id").textContent = v.node;
  $("#node-role").textContent = v.raft.role;
  $("#node-leader").textContent = v.leader_id || "none";
  $("#node-term").textContent = v.raft.term;
  $("#node-index").textContent = v.raft.commit_index + " / " + v.raft.applied_index;
  $("#node-contact").textContent = contact(v.raft.role, v.raft.last_contact_ms);
  $("#node-token").textContent = v.token;

  const lb = $("#locks tbody");
  lb.replaceChildren(...v.locks.map((l) => {
    const ttl = el("td", { class: "ttl", "data-remaining": l.remaining_ms });
    const queue = queueText(l.queue);
    const delay = l.lock_delay ? el("span", { class: "delay" }, "in lock-delay (" + fmtMs(l.lock_delay_ms) + ", after token " + l.lock_delay_token + ")") : "";
    // Every holding: the readers of a read lock, the permits of a semaphore.
    const hs = l.holders || [];
    const tag = (h) => (l.permits > 1 ? " · permit " + h.slot : "") + (h.mode === "shared" ? " · shared" : "");
    const owners = hs.map((h) => el("div", { class: "holder", "data-token": h.token, "data-mode": h.mode, "data-slot": h.slot },
      (h.owner || (h.lease_id || "?").slice(0, 8)) + tag(h)));
    // An admin may end any holding (the server refuses anyone else).
    const acts = admin ? hs.filter((h) => h.lease_id).map((h) => el("div", {},
      action("release:" + l.name + ":" + h.lease_id + ":" + h.token, "force release",
        () => post("api/release", { name: l.name, lease_id: h.lease_id, token: h.token })))) : [];
    const held = hs.map((h) => el("div", { class: "held", "data-token": h.token }, h.acquired_unix_ms ? fmtMs(Math.max(0, v.now_ms - h.acquired_unix_ms)) : "?"));
    const tokens = hs.map((h) => el("div", { class: "holder-token", "data-token": h.token }, String(h.token)));
    const name = el("td", { class: "name", title: l.name }, l.name);
    if (l.permits > 1) name.append(el("span", { class: "permits" }, " " + hs.length + "/" + l.permits + " permits"));
    return el("tr", { "data-lock": l.name, "data-token": l.token || 0, "data-holders": hs.length },
      name, el("td", { class: "owner" }, ...(owners.length ? owners : ["—"])),
      el("td", { class: "token" }, ...(tokens.length ? tokens : ["—"])), el("td", { class: "held-for" }, ...(held.length ? held : ["—"])),
      ttl, el("td", { class: "queue", "data-waiters": l.queue.length }, queue || "—"), el("td", {}, delay || "—"), el("td", { class: "actions" }, ...acts));
  }));
  $("#locks-empty").hidden = v.locks.length > 0;
  more("#locks-more", v.truncated, v.locks.length, v.lock_count, "locks, in name order");

  $("#sessions tbody").replaceChildren(...v.sessions.map((s) =>
    el("tr", { "data-session": s.lease_id },
      el("td", { title: s.lease_id }, s.lease_id.slice(0, 12) + "…"), el("td", {}, s.owner || "—"),
      el("td", {}, fmtMs(s.ttl_ms)), el("td", { class: "ttl", "data-remaining": s.remaining_ms }),
      el("td", {}, admin ? action("end:" + s.lease_id, "end session", () => post("api/end-session", { lease_id: s.lease_id })) : ""))));

  more("#sessions-more", v.sessions_truncated, v.sessions.length, v.session_count, "sessions, in lease id order");

  $("#members tbody").replaceChildren(...v.members.map((m) =>
    el("tr", { "data-member": m.id, "data-role": m.role },
      el("td", {}, m.id + (m.id === v.node ? " (this node)" : "")), el("td", { class: "role role-" + m.role }, m.role),
      el("td", {}, m.suffrage), el("td", {}, m.term), el("td", {}, m.commit_index), el("td", {}, m.applied_index),
      el("td", { class: "contact" }, contact(m.role, m.last_contact_ms)), el("td", {}, m.raft_addr), el("td", {}, m.api_addr))));
  tick();
}

// tick counts the TTLs down between refreshes.
function tick() {
  for (const td of document.querySelectorAll("td.ttl")) {
    const rem = Number(td.dataset.remaining);
    if (td.closest("tr").dataset.lock && td.closest("tr").dataset.token === "0") { td.textContent = "—"; continue; }
    const ms = left(rem);
    td.textContent = ms < 0 ? "not leader" : fmtMs(ms);
    td.classList.toggle("ttl-low", ms >= 0 && ms < 2000);
  }
}

// ---- events ----------------------------------------------------------

function addEvent(ev) {
  state.events.push(ev);
  if (ev.type === "acquired") state.tokenName.set(ev.token, ev.name);
  // A fenced write belongs to the lock whose grant issued its token.
  const name = ev.type.startsWith("kv_") ? (state.tokenName.get(ev.token) || ev.name) : ev.name;
  if (!state.byName.has(name)) state.byName.set(name, []);
  state.byName.get(name).push(ev);
  if (ev.type !== "queued" && ev.type !== "dequeued" && ev.type !== "lock_delay_ended") state.latest = name;

  const list = $("#events");
  const who = ev.owner || (ev.lease_id || "").slice(0, 8);
  const what = {
    acquired: () => `${who} got token ${ev.token}`,
    released: () => `${who} released token ${ev.token}`,
    expired: () => `${who} expired, token ${ev.token}`,
    queued: () => `${who} queued`,
    dequeued: () => `${who} left the queue`,
    lock_delay_ended: () => `lock-delay ended`,
    kv_accepted: () => `write with token ${ev.token} accepted`,
    kv_refused: () => `write with token ${ev.token} REFUSED: ${ev.reason}` + (ev.last_token ? ` (key holds ${ev.last_token})` : ""),
  }[ev.type];
  const text = what ? what() : ev.type;
  list.prepend(el("li", { class: "ev ev-" + ev.type, "data-type": ev.type, "data-name": ev.name, "data-token": ev.token || 0 },
    el("span", { class: "t" }, clock(ev.unix_ms)), el("span", { class: "k" }, ev.type.replace("_", " ")), " ",
    el("b", {}, ev.name || "(key)"), " ", text));
  while (list.children.length > MAX_EVENTS) list.lastChild.remove();
}

let drawPending = false;
function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; updateNames(); drawTimeline(); });
}

function updateNames() {
  const sel = $("#tl-name");
  const names = [...state.byName.keys()].filter((n) => state.byName.get(n).some((e) => e.token)).sort();
  if (sel.options.length !== names.length) {
    sel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
  }
  const want = state.chosen || state.latest || names[0] || "";
  if (sel.value !== want) sel.value = want;
}

const NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function drawTimeline() {
  const box = $("#timeline");
  const name = $("#tl-name").value;
  const evs = (state.byName.get(name) || []).filter((e) => e.token);
  box.dataset.name = name;
  if (!evs.length) { box.replaceChildren(svg("text", { x: 20, y: 30 }, "No tokens yet: acquire a lock.")); return; }
  const W = 900, H = 240, L = 70, R = 40, T = 20, B = 30;
  const t0 = Math.min(...evs.map((e) => e.unix_ms));
  const t1 = Math.max(serverNow(), ...evs.map((e) => e.unix_ms));
  // x is ordinal: every distinct event time gets an equal step, so a grant,
  // its expiry and the writes that follow a millisecond apart stay readable.
  const times = [...new Set(evs.map((e) => e.unix_ms).concat([t1]))].sort((a, b) => a - b);
  const step = (W - L - R) / Math.max(1, times.length - 1);
  const x = (t) => L + step * times.indexOf(t);
  const tokens = [...new Set(evs.map((e) => e.token))].sort((a, b) => a - b);
  const lane = (tok) => H - B - (H - T - B) * ((tokens.indexOf(tok) + 1) / (tokens.length + 1));
  const kids = [svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }), svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B })];
  let lastTick = -1e9;
  for (const t of times) {
    if (x(t) - lastTick < 56) continue;
    lastTick = x(t);
    kids.push(svg("text", { class: "tick", x: x(t) - 14, y: H - B + 16 }, t === t1 && t !== t0 ? "now" : "+" + ((t - t0) / 1000).toFixed(t - t0 < 10000 ? 2 : 1) + "s"));
  }
  kids.push(svg("text", { class: "tick", x: 4, y: T + 4 }, "token"));
  for (const tok of tokens) {
    const y = lane(tok);
    const grant = evs.find((e) => e.type === "acquired" && e.token === tok);
    const end = evs.find((e) => (e.type === "released" || e.type === "expired") && e.token === tok);
    kids.push(svg("text", { class: "tick", x: 8, y: y + 4 }, String(tok)));
    if (grant) {
      const xe = x(end ? end.unix_ms : t1);
      kids.push(svg("line", { class: "grant", "data-token": tok, x1: x(grant.unix_ms), y1: y, x2: Math.max(xe, x(grant.unix_ms) + 2), y2: y }));
      kids.push(svg("text", { x: x(grant.unix_ms), y: y - 8 }, (grant.owner || (grant.lease_id || "").slice(0, 8)) + " · token " + tok));
    }
    if (end && end.type === "expired") {
      const xe = x(end.unix_ms);
      kids.push(svg("path", { class: "expired", d: `M${xe} ${y - 7} L${xe + 7} ${y} L${xe} ${y + 7} L${xe - 7} ${y} Z` }));
      kids.push(svg("text", { x: xe + 10, y: y - 8 }, "expired"));
    } else if (end) {
      kids.push(svg("rect", { class: "released", x: x(end.unix_ms) - 2, y: y - 8, width: 4, height: 16 }));
    }
  }
  for (const e of evs) {
    if (e.type === "kv_accepted") {
      kids.push(svg("circle", { class: "accepted", "data-token": e.token, cx: x(e.unix_ms), cy: lane(e.token), r: 6 }));
      kids.push(svg("text", { class: "tick", x: x(e.unix_ms) + 9, y: lane(e.token) + 18 }, "write ok"));
    } else if (e.type === "kv_refused") {
      const cx = x(e.unix_ms), cy = lane(e.token);
      const g = svg("g", { class: "refused", "data-token": e.token });
      g.append(svg("line", { x1: cx - 7, y1: cy - 7, x2: cx + 7, y2: cy + 7 }), svg("line", { x1: cx - 7, y1: cy + 7, x2: cx + 7, y2: cy - 7 }));
      const right = cx > W / 2;
      kids.push(g, svg("text", { class: "refused-label", x: right ? cx - 10 : cx + 10, y: cy + 20, "text-anchor": right ? "end" : "start" },
        "token " + e.token + " write refused: " + e.reason + (e.last_token ? " (key holds " + e.last_token + ")" : "")));
    }
  }
  box.replaceChildren(...kids);
}

// follow reads the event stream with fetch (an EventSource cannot send a
// bearer token) and reconnects after Last-Event-ID until stopped.
async function follow(live) {
  let lastID = "";
  while (!live.stopped) {
    try {
      const headers = lastID ? { "Last-Event-ID": lastID } : {};
      const r = await api("api/events", { headers, signal: live.abort.signal });
      $("#conn").textContent = "live"; $("#conn").className = "conn-up";
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("id: ")) lastID = line.slice(4);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (data) { addEvent(JSON.parse(data)); scheduleDraw(); refresh(); }
        }
      }
    } catch (e) {
      if (live.stopped || refused(e)) return;
    }
    $("#conn").textContent = "reconnecting"; $("#conn").className = "conn-down";
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

// ---- KV browser ------------------------------------------------------

async function listKV() {
  const after = state.kvAfter[state.kvAfter.length - 1];
  const q = new URLSearchParams({ prefix: $("#kv-prefix").value, after });
  try {
    const page = await (await api("api/kv?" + q)).json();
    $("#kv tbody").replaceChildren(...page.keys.map((k) =>
      el("tr", { "data-key": k.key, "data-token": k.token },
        el("td", { class: "key", title: k.key }, k.key), el("td", { class: "kv-token" }, String(k.token)),
        el("td", {}, k.deleted ? "deleted" : k.size + " B"),
        el("td", { class: "kv-value", title: k.value }, k.deleted ? "—" : k.value + (k.cut ? "…" : "")))));
    $("#kv-empty").hidden = page.keys.length > 0;
    $("#kv-next").hidden = !page.next;
    $("#kv-next").dataset.next = page.next || "";
  } catch (e) {
    if (!refused(e)) $("#kv-empty").textContent = "KV: " + e.message;
  }
}

$("#kv-form").addEventListener("submit", (e) => { e.preventDefault(); state.kvAfter = [""]; listKV(); });
$("#kv-next").addEventListener("click", () => { state.kvAfter.push($("#kv-next").dataset.next); listKV(); });

// ---- live ------------------------------------------------------------

let live = null;
function startLive() {
  stopLive();
  live = { stopped: false, abort: new AbortController(), timers: [] };
  follow(live);
  refresh();
  state.kvAfter = [""];
  listKV();
  live.timers.push(setInterval(refresh, 1000), setInterval(tick, 100), setInterval(drawTimeline, 1000));
}

function stopLive() {
  if (!live) return;
  live.stopped = true;
  live.abort.abort();
  live.timers.forEach(clearInterval);
  live = null;
}

$("#tl-name").addEventListener("change", (e) => { state.chosen = e.target.value; drawTimeline(); });
start();
