// The live view's page: polls the proxy's JSON twice a second and draws it. No library, nothing
// fetched from anywhere but this proxy (docs/live-view.md).
"use strict";

const POLL_MS = 500; // a new conversation shows within a second of its first request
const token = new URLSearchParams(location.search).get("token");
const headers = token ? { Authorization: "Bearer " + token } : {};
const state = { selected: null, stamp: "", turnsAt: -1, conversations: [] };
const $ = (id) => document.getElementById(id);

function api(path) {
  return fetch("api/" + path, { headers, credentials: "same-origin", cache: "no-store" })
    .then((r) => { if (!r.ok) throw new Error(r.status + " " + r.statusText); return r.json(); });
}

function n(value) {
  return value === null || value === undefined ? "—" : Number(value).toLocaleString("en-US");
}

function pct(value) {
  return value === null || value === undefined ? "—" : (100 * value).toFixed(1) + "%";
}

function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  if (d.toDateString() === new Date().toDateString()) return time;
  return d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + time;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function k(value) {
  if (value === null || value === undefined) return "—";
  return value >= 1e6 ? (value / 1e6).toFixed(1) + "M"
    : value >= 1e3 ? (value / 1e3).toFixed(1) + "k" : String(Math.round(value));
}

function costText(cost) {
  if (!cost) return "—";
  return `${k(cost.sent)} / ${k(cost.full)} / ${k(cost.compaction)}`;
}

function drawConversations(rows) {
  const body = document.querySelector("#conversations tbody");
  body.replaceChildren();
  for (const c of rows) {
    const tr = el("tr", { "data-session": c.session },
      el("td", { class: "agent" }, c.agent || "—"), el("td", {}, c.model || "—"),
      el("td", {}, when(c.first_seen)), el("td", {}, when(c.last_request)),
      el("td", { class: "requests" }, n(c.requests)), el("td", { class: "paged" }, n(c.paged)),
      el("td", {}, n(c.within_budget)),
      el("td", { title: c.last_fail_open || "" }, n(c.failed_open)),
      el("td", { class: "cut-advances" }, n(c.cut_advances)),
      el("td", {}, n(c.tokens_sent)), el("td", {}, n(c.tokens_full)),
      el("td", {}, n(c.input_tokens)), el("td", {}, n(c.cache_read_tokens)),
      el("td", {}, n(c.cache_write_tokens)), el("td", {}, pct(c.cache_read_share)),
      el("td", {}, costText(c.cost)));
    if (c.session === state.selected) tr.classList.add("selected");
    tr.addEventListener("click", () => select(c.session));
    body.append(tr);
  }
  $("empty").hidden = rows.length > 0;
}

function card(value, label) {
  return el("div", { class: "card" }, el("b", {}, value), el("span", {}, label));
}

function drawDetail(d) {
  $("detail").hidden = false;
  $("detail-title").textContent = `${d.agent || "conversation"} · ${d.model || ""}`;
  $("detail-session").textContent = d.session;
  const saved = d.tokens_full ? 1 - d.tokens_sent / d.tokens_full : null;
  $("cards").replaceChildren(
    card(n(d.requests), "requests"),
    card(`${n(d.paged)} / ${n(d.within_budget)} / ${n(d.failed_open)}`,
      "paged / within budget / failed open"),
    card(n(d.cut_advances), "cut advances"),
    card(`${n(d.last_tokens_sent)} of ${n(d.budget_tokens)}`, "last request vs budget"),
    card(pct(saved), "saved against the full history"),
    card(pct(d.cache_read_share), "cache-read share"),
    card(costText(d.cost), "est. cost: sent / everything / compaction"));
  $("chart").outerHTML = d.chart.replace("<svg ", '<svg id="chart" ');
  const evicted = d.evicted_messages || 0;
  $("cut").textContent = d.frontier
    ? `${n(evicted)} messages are out of the window; the cut is after turn `
      + `${d.frontier.last_evicted.history_id} (${d.frontier.kind}).`
    : "Nothing is out of the window yet: the whole conversation fits the budget.";
  $("notice").textContent = d.notice || "No notice: nothing has left the window.";
  $("distilled").replaceChildren(...(d.distilled.length ? d.distilled.map((e) =>
    el("li", {}, el("b", {}, e.action.replace(/_/g, " ")),
      ` ${e.tool_call_id || e.history_id} (judge ${e.judge}): ${n(e.saved_tokens)} tokens, `
      + `${n(e.saved_characters)} characters cut; the original: `, el("code", {}, e.recall)))
    : [el("li", { class: "muted" }, "No edits in the latest window.")]));
  $("fail-opens").replaceChildren(...(d.fail_opens.length ? d.fail_opens.map((f) =>
    el("li", { class: "bad" }, `request ${f.n}: ${f.reason}`))
    : [el("li", { class: "muted" }, "None: every request was paged or within budget.")]));
}

function drawTurns(t) {
  const list = $("turns-out");
  list.replaceChildren();
  if (!t.out.length) list.append(el("li", { class: "muted" }, "No turn is out of the window."));
  for (const ref of t.out) {
    const open = el("button", { type: "button", "data-history-id": ref.history_id }, "open");
    open.addEventListener("click", () => openTurn(ref.history_id));
    list.append(el("li", { "data-history-id": ref.history_id }, open,
      el("span", { class: "muted" }, `#${ref.sequence} ${ref.kind} `), ref.preview || ""));
  }
  const calls = $("recovery");
  calls.replaceChildren();
  if (!t.recovery_calls.length) {
    calls.append(el("li", { class: "muted" }, "The model has paged nothing back yet."));
  }
  for (const c of t.recovery_calls) {
    calls.append(el("li", {}, el("b", {}, c.tool), ` ${c.arguments} → `,
      el("span", { class: c.returned ? "ok" : "bad" },
        c.returned ? "returned something" : (c.answered ? "returned nothing" : "no answer yet"))));
  }
}

function openTurn(historyId) {
  api(`conversations/${encodeURIComponent(state.selected)}/turns/` +
      encodeURIComponent(historyId)).then((t) => {
    $("turn").hidden = false;
    $("turn-title").textContent = `Original turn ${historyId}`;
    $("turn-original").textContent = JSON.stringify(t.item, null, 2);
  }).catch((e) => { $("status").textContent = "Could not open the turn: " + e.message; });
}

function select(session) {
  state.selected = session;
  state.stamp = "";
  state.turnsAt = -1;
  $("turn").hidden = true;
  drawConversations(state.conversations);
  refreshDetail();
}

// What changes when a request comes or the provider's usage for a reply is kept.
function stamp(c) {
  return [c.requests, c.input_tokens, c.cache_read_tokens, c.cache_write_tokens].join(" ");
}

function refreshDetail() {
  const session = state.selected;
  if (!session) return Promise.resolve();
  const row = state.conversations.find((c) => c.session === session);
  if (row && stamp(row) === state.stamp) return Promise.resolve();
  return api("conversations/" + encodeURIComponent(session)).then((d) => {
    if (state.selected !== session) return;
    state.stamp = stamp(d);
    drawDetail(d);
    if (state.turnsAt !== d.requests) {
      state.turnsAt = d.requests;
      return api(`conversations/${encodeURIComponent(session)}/turns`).then(drawTurns);
    }
  });
}

function tick() {
  api("conversations").then((d) => {
    state.conversations = d.conversations;
    if (!state.selected && d.conversations.length) state.selected = d.conversations[0].session;
    drawConversations(d.conversations);
    $("status").textContent = `${d.conversations.length} conversation(s) · updated `
      + new Date().toLocaleTimeString();
    return refreshDetail();
  }).catch((e) => { $("status").textContent = "The proxy did not answer: " + e.message; })
    .finally(() => setTimeout(tick, POLL_MS));
}

tick();
