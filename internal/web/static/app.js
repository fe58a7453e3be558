// leasehold dashboard: polls /ui/api/state, follows /ui/api/events (SSE)
// and draws a token timeline per lock name. Plain browser JavaScript, no
// build step.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = { view: null, fetchedAt: 0, events: [], byName: new Map(), tokenName: new Map(), chosen: "" };
const MAX_EVENTS = 500;

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
    const r = await fetch("api/state", { cache: "no-store" });
    if (!r.ok) throw new Error(await r.text());
    state.view = await r.json();
    state.fetchedAt = performance.now();
    render();
  } catch (e) {
    $("#node-role").textContent = "unreachable";
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

function render() {
  const v = state.view;
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
    const queue = l.queue.map((w) => w.owner || w.lease_id.slice(0, 8)).join(", ");
    const delay = l.lock_delay ? el("span", { class: "delay" }, "in lock-delay (" + fmtMs(l.lock_delay_ms) + ", after token " + l.lock_delay_token + ")") : "";
    // Every holding: the readers of a read lock, the permits of a semaphore.
    const hs = l.holders || [];
    const tag = (h) => (l.permits > 1 ? " · permit " + h.slot : "") + (h.mode === "shared" ? " · shared" : "");
    const owners = hs.map((h) => el("div", { class: "holder", "data-token": h.token, "data-mode": h.mode, "data-slot": h.slot },
      (h.owner || h.lease_id.slice(0, 8)) + tag(h)));
    const tokens = hs.map((h) => el("div", { class: "holder-token", "data-token": h.token }, String(h.token)));
    const name = el("td", { class: "name", title: l.name }, l.name);
    if (l.permits > 1) name.append(el("span", { class: "permits" }, " " + hs.length + "/" + l.permits + " permits"));
    return el("tr", { "data-lock": l.name, "data-token": l.token || 0, "data-holders": hs.length },
      name, el("td", { class: "owner" }, ...(owners.length ? owners : ["—"])),
      el("td", { class: "token" }, ...(tokens.length ? tokens : ["—"])), ttl, el("td", { class: "queue" }, queue || "—"), el("td", {}, delay || "—"));
  }));
  $("#locks-empty").hidden = v.locks.length > 0;
  more("#locks-more", v.truncated, v.locks.length, v.lock_count, "locks, in name order");

  $("#sessions tbody").replaceChildren(...v.sessions.map((s) =>
    el("tr", { "data-session": s.lease_id },
      el("td", { title: s.lease_id }, s.lease_id.slice(0, 12) + "…"), el("td", {}, s.owner || "—"),
      el("td", {}, fmtMs(s.ttl_ms)), el("td", { class: "ttl", "data-remaining": s.remaining_ms }))));

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

function connect() {
  const es = new EventSource("api/events");
  es.onopen = () => { $("#conn").textContent = "live"; $("#conn").className = "conn-up"; };
  es.onerror = () => { $("#conn").textContent = "reconnecting"; $("#conn").className = "conn-down"; };
  es.onmessage = (m) => {
    addEvent(JSON.parse(m.data));
    scheduleDraw();
    refresh();
  };
}

$("#tl-name").addEventListener("change", (e) => { state.chosen = e.target.value; drawTimeline(); });
connect();
refresh();
setInterval(refresh, 1000);
setInterval(tick, 100);
setInterval(drawTimeline, 1000);
