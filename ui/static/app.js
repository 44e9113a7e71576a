// claimd web UI: plain JavaScript, no build step, no dependency.
//
// Every page reads the cluster through the public HTTP API with the token
// kept in this tab's session storage; the servers decide what it may see
// and do. A page stays current through blocking queries (the API's
// ?index=&wait=): one per table it shows state from, so an idle page costs
// the servers a waiting request or a few, not a poll every second.
"use strict";

const TOKEN_KEY = "claimd-token";
// /ui/?once renders each page once and stops: no blocking query stays
// open, so a headless browser's --virtual-time-budget (which waits for
// the network to go quiet) ends, and its screenshot or --dump-dom shows
// the data rather than "Loading…".
const ONCE = new URLSearchParams(location.search).has("once");
// How long a blocking query waits for a change. Pages that also show data
// kept outside Raft (the leader's release retry state, Raft health) see it
// refreshed at least this often.
const WAIT = "15s";
// Backoff after a failed request: doubles up to the maximum, resets on the
// first success.
const BACKOFF_MIN_MS = 1000;
const BACKOFF_MAX_MS = 15000;

// ---- small DOM helpers (text only: data from the API is never HTML) ----

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function link(hash, text) { return h("a", { href: hash }, text); }

function table(caption, headers, rows, attrs) {
  // Each cell carries its column's name: on a phone the rows stack as
  // cards and the names label the values (style.css).
  for (const row of rows) [...row.children].forEach((cell, i) => cell.setAttribute("data-label", headers[i] || ""));
  return h("div", { class: "table-wrap" },
    h("table", attrs || {},
      h("caption", {}, caption),
      h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, "None")))));
}

function badge(text, kind) { return h("span", { class: "badge " + (kind || "") }, text); }

// fmtContact shows a Go duration string ("60.934381ms", "1m33.2451s") the
// way the CLI shows a last contact: whole milliseconds below a second,
// tenths of a second above; "never" as it comes.
function fmtContact(d) {
  if (typeof d !== "string" || d === "" || d === "never") return d;
  if (d.startsWith("-")) return "never";
  const units = { h: 3600e3, m: 60e3, s: 1e3, ms: 1, "µs": 1e-3, "us": 1e-3, ns: 1e-6 };
  let ms = 0;
  for (const [, n, u] of d.matchAll(/([0-9.]+)(h|ms|m|s|µs|us|ns)/g)) ms += parseFloat(n) * units[u];
  if (ms < 1000) return Math.round(ms) + "ms";
  const tenths = Math.round(ms / 100) / 10;
  if (tenths < 60) return tenths + "s";
  const min = Math.floor(tenths / 60);
  return min + "m" + Math.round((tenths - min * 60) * 10) / 10 + "s";
}

function fmtTime(t) {
  if (!t || t.startsWith("0001-")) return "—";
  const d = new Date(t);
  return isNaN(d) ? t : d.toLocaleString();
}

function fmtRelative(t) {
  if (!t || t.startsWith("0001-")) return "—";
  const ms = new Date(t) - Date.now();
  if (Math.abs(ms) < 2000) return "now";
  const s = Math.round(Math.abs(ms) / 1000);
  const txt = s < 90 ? s + " s" : s < 5400 ? Math.round(s / 60) + " min" : Math.round(s / 3600) + " h";
  return ms >= 0 ? "in " + txt : txt + " ago";
}

// ---- token ----

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function showTokenState() {
  document.getElementById("token-state").textContent = token() ? "token set for this tab" : "no token (anonymous)";
}

// ---- API ----

class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// describe turns an API error into the sentence the page shows. A 403
// names the capability the token lacks: the servers' message says which
// ("Volume.Detach: the token does not grant volume:detach").
function describe(err) {
  if (!(err instanceof APIError)) return "Cannot reach the agent: " + err.message;
  if (err.status === 403) {
    const m = /does not grant (\S+)/.exec(err.message);
    const cap = m ? "Missing capability " + m[1] + ". " : "";
    return "Permission denied. " + cap + "(" + err.message + ") Enter a token that grants it.";
  }
  return err.message + " (HTTP " + err.status + ", " + err.code + ")";
}

async function api(path, opts) {
  opts = opts || {};
  const headers = { Accept: "application/json" };
  if (token()) headers["X-Claimd-Token"] = token();
  const resp = await fetch(path, { method: opts.method || "GET", headers, signal: opts.signal, cache: "no-store" });
  const text = await resp.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
  // Some routes answer a verdict with a status of its own: the agent's
  // health 503 and Raft health 429 carry the report, not an error.
  if (!resp.ok && !(opts.accept || []).includes(resp.status)) {
    const msg = body && body.error ? body.error : text || resp.statusText;
    throw new APIError(resp.status, body && body.code ? body.code : "http_" + resp.status, msg);
  }
  return { body, index: Number(resp.headers.get("X-Claimd-Index") || 0) };
}

// optional fetches data a page can do without (another capability): its
// failure becomes a note, not the page's error.
async function optional(path, signal, notes, accept) {
  try {
    return (await api(path, { signal, accept })).body;
  } catch (err) {
    if (err.name === "AbortError" || !(err instanceof APIError)) throw err;
    notes.push(path + ": " + describe(err));
    return null;
  }
}

// ---- banner and errors ----

function setBanner(text) {
  const b = document.getElementById("banner");
  b.textContent = text || "";
  b.hidden = !text;
}

function setError(text) {
  const e = document.getElementById("error");
  e.textContent = text || "";
  e.hidden = !text;
}

// ---- the live loop: one blocking query at a time per page ----

let current = null; // { abort: AbortController } of the page shown

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); reject(new DOMException("aborted", "AbortError")); }, { once: true });
  });
}

// live runs page.load(params, index, signal, cursor) again each time its
// blocking query returns, and renders what it returns. A page that blocks
// on several tables returns a cursor (its Sources) and, as index, a number
// that grows whenever any of them moves. Network errors and 5xx show the
// banner and retry with backoff; a 4xx stops the loop with the error shown
// (a new token or page starts again).
async function live(page, params) {
  if (current) current.abort.abort();
  const ctl = { abort: new AbortController() };
  current = ctl;
  const signal = ctl.abort.signal;
  let index = 0;
  let cursor = null;
  let backoff = BACKOFF_MIN_MS;
  const main = document.getElementById("main");
  while (!signal.aborted) {
    try {
      const started = Date.now();
      const res = await page.load(params, index, signal, cursor);
      if (signal.aborted) return;
      cursor = res.cursor || null;
      // A blocking query that answers at once with nothing new (a server
      // that does not block) must not turn into a tight loop.
      if (index && res.index === index && Date.now() - started < 1000) await sleep(1000, signal);
      // An index that went backwards (a restored snapshot, another
      // cluster) would block for nothing: start over.
      index = res.index > index ? res.index : res.index < index ? 0 : index;
      if (!index) cursor = null;
      setBanner("");
      if (!page.keepError) setError("");
      const view = page.render(res.data, params);
      if (res.notes && res.notes.length) view.prepend(h("p", { class: "note" }, res.notes.join(" ")));
      const focusID = document.activeElement && document.activeElement.id;
      main.replaceChildren(view);
      // Keep the keyboard where it was across a live re-render.
      if (focusID) { const f = document.getElementById(focusID); if (f) f.focus(); }
      backoff = BACKOFF_MIN_MS;
      document.body.dataset.index = String(index);
      if (ONCE) { document.body.dataset.connection = "ok"; return; }
      if (!res.index) await sleep(page.refreshMs || 10000, signal); // no index to block on
    } catch (err) {
      if (signal.aborted || err.name === "AbortError") return;
      if (err instanceof APIError && err.status < 500) {
        setBanner("");
        setError(describe(err));
        main.replaceChildren(h("p", { class: "muted" }, "Nothing to show."));
        return;
      }
      const secs = Math.round(backoff / 1000);
      setBanner("Connection to the agent lost (" + (err.message || err) + "); retrying in " + secs + " s…");
      document.body.dataset.connection = "lost";
      try { await sleep(backoff, signal); } catch (e) { return; }
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      continue;
    }
    document.body.dataset.connection = "ok";
  }
}

function blocking(path, index) {
  const sep = path.includes("?") ? "&" : "?";
  return index ? path + sep + "index=" + index + "&wait=" + WAIT : path;
}

// Sources keeps a page live on several tables at once: the nodes page
// shows a node's state (nodes), its allocations (allocs) and whether it is
// drained, which is its volumes' claims (volumes); blocking on the nodes
// alone showed a finished drain only when that query timed out, 15 s
// later. Each source has at most one blocking query in flight, at its own
// index; changed() returns as soon as any of them answers, and the others
// stay in flight into the next round instead of being cancelled and
// asked again: the server does not see a query cancelled (the agent only
// drops its stream), so it stays parked there until what it watches
// changes or its wait runs out, and counts against the token's limit of
// reads in flight (endpoints/query_gate.go): cancelling the slower ones
// on every change would pile them up there. The page's signal cancels them all when the
// page goes. So a page costs one request in flight per source, and one
// new request per answer.
//
// specs: name -> { path, optional }. An optional source the token may not
// read becomes a note, as optional() does, and is not asked again.
class Sources {
  constructor(specs) {
    this.specs = specs;
    this.state = {}; // name -> { body, index, pending, note }
  }

  // load reads every source once, without blocking.
  async load(signal) {
    await Promise.all(Object.entries(this.specs).map(async ([name, spec]) => {
      const st = { body: null, index: 0, pending: null, note: "" };
      this.state[name] = st;
      try {
        const r = await api(spec.path, { signal });
        st.body = r.body;
        st.index = r.index;
      } catch (err) {
        if (!this.refused(spec, st, err)) throw err;
      }
    }));
  }

  refused(spec, st, err) {
    if (!spec.optional || !(err instanceof APIError) || err.status >= 500) return false;
    st.body = null;
    st.note = spec.path + ": " + describe(err);
    return true;
  }

  // changed waits until one source's blocking query answers, and keeps
  // its answer; a wait that ran out answers too, with the same index (live
  // keeps that from looping).
  async changed(signal) {
    const waiting = [];
    for (const [name, spec] of Object.entries(this.specs)) {
      const st = this.state[name];
      if (st.note) continue;
      if (!st.pending) {
        st.pending = api(blocking(spec.path, st.index), { signal })
          .then((r) => ({ name, r }), (err) => ({ name, err }));
      }
      waiting.push(st.pending);
    }
    if (!waiting.length) return sleep(15000, signal); // nothing to block on
    const { name, r, err } = await Promise.race(waiting);
    const st = this.state[name];
    st.pending = null;
    if (err) {
      if (!this.refused(this.specs[name], st, err)) throw err;
      return;
    }
    st.body = r.body;
    st.index = r.index;
  }

  body(name) { return this.state[name].body; }

  notes() { return Object.values(this.state).map((st) => st.note).filter(Boolean); }

  // index grows whenever any source's index does (live's loop guard and
  // its start-over on an index that went backwards).
  index() { return Object.values(this.state).reduce((sum, st) => sum + st.index, 0); }
}

// sourcesRound is one round of a page on Sources: the first read of them
// all (index 0: live starts or starts over), or the next change of any.
async function sourcesRound(specs, index, signal, cursor) {
  if (!index || !cursor) {
    cursor = new Sources(specs);
    await cursor.load(signal);
  } else {
    await cursor.changed(signal);
  }
  return cursor;
}

// ---- shared lookups ----

function claimsOf(v) {
  const out = [];
  for (const c of Object.values(v.read_claims || {})) out.push({ ...c, kind: "live" });
  for (const c of Object.values(v.write_claims || {})) out.push({ ...c, kind: "live" });
  for (const c of Object.values(v.past_claims || {})) out.push({ ...c, kind: "past" });
  return out;
}

function nodeName(nodes, id) {
  const n = (nodes || []).find((x) => x.id === id);
  return n ? n.name : id ? id.slice(0, 8) : "—";
}

function nodeLink(nodes, id) { return id ? link("#/node/" + encodeURIComponent(id), nodeName(nodes, id)) : "—"; }

// releaseState says where a volume's releases stand: failing (the leader
// has retried), releasing (past claims, no failure yet), in use or free.
function releaseState(v, retry) {
  const past = Object.keys(v.past_claims || {}).length;
  const live = Object.keys(v.read_claims || {}).length + Object.keys(v.write_claims || {}).length;
  if (past && retry && retry.attempts > 0) return "failing";
  if (past) return "releasing";
  if (live) return "in-use";
  return "free";
}

const STATE_RANK = { failing: 0, releasing: 1, "in-use": 2, free: 3 };
const STATE_KIND = { failing: "bad", releasing: "warn", "in-use": "ok", free: "" };

const STEP_LABEL = {
  taken: "claimed",
  unpublishing: "alloc stopped (release started)",
  "node-detached": "node detached",
  "controller-detached": "controller detached",
  freed: "freed",
};

// ---- pages ----

const pages = {};

pages.cluster = {
  refreshMs: 5000,
  async load(params, index, signal) {
    const notes = [];
    const [health, raft, self] = await Promise.all([
      api("/v1/agent/health", { signal, accept: [503] }).then((r) => r.body),
      optional("/v1/operator/raft/health", signal, notes, [429]),
      optional("/v1/agent/self", signal, notes),
    ]);
    return { index: 0, data: { health, raft, self }, notes };
  },
  render({ health, raft, self }) {
    const out = h("section", { "aria-labelledby": "h-cluster" }, h("h1", { id: "h-cluster" }, "Cluster"));
    if (raft) {
      out.append(h("p", {}, "Raft: ", raft.healthy ? badge("healthy", "ok") : badge("unhealthy", "bad"),
        " failure tolerance ", String(raft.failure_tolerance), "; leader ",
        (raft.servers.find((s) => s.leader) || {}).name || "none"));
      out.append(table("Servers", ["Name", "Role", "Address", "Version", "Status", "Last contact", "Index lag", "Healthy"],
        raft.servers.map((s) => h("tr", { "data-server": s.id },
          h("td", {}, s.name), h("td", {}, s.leader ? badge("leader", "ok") : s.voter ? "follower" : "non-voter"),
          h("td", {}, s.address), h("td", {}, s.version || "unknown"), h("td", {}, s.status), h("td", {}, fmtContact(s.last_contact)),
          h("td", {}, String(s.index_lag)), h("td", {}, s.healthy ? badge("yes", "ok") : badge("no", "bad"))))));
    }
    const agent = h("section", { "aria-labelledby": "h-agent" }, h("h2", { id: "h-agent" }, "This agent"));
    if (health) {
      agent.append(h("p", {}, health.ok ? badge("healthy", "ok") : badge("unhealthy", "bad"), " role ", health.role,
        health.reason ? " — " + health.reason : ""));
      const dl = h("dl", { class: "facts" });
      if (self) dl.append(h("dt", {}, "Version"), h("dd", {}, self.version));
      if (health.server) {
        dl.append(h("dt", {}, "Raft state"), h("dd", {}, health.server.raft_state),
          h("dt", {}, "Leader"), h("dd", {}, health.server.leader || "none"),
          h("dt", {}, "Commit / applied"), h("dd", {}, health.server.commit_index + " / " + health.server.applied_index),
          h("dt", {}, "Last contact"), h("dd", {}, fmtContact(health.server.last_contact)));
      }
      if (health.client) {
        dl.append(h("dt", {}, "Client session"), h("dd", {}, health.client.server_session ? "connected" : "not connected"));
        for (const [id, p] of Object.entries(health.client.plugins || {})) {
          dl.append(h("dt", {}, "Plugin " + id), h("dd", {}, p.healthy ? badge("healthy", "ok") : badge("unhealthy", "bad"), " ", p.description || ""));
        }
      }
      agent.append(dl);
    } else {
      agent.append(h("p", {}, badge("unhealthy", "bad"), " the agent's health check failed"));
    }
    out.append(agent);
    return out;
  },
};

// The volumes page keeps its filters across live re-renders.
const volumeFilters = { q: "", plugin: "", node: "", state: "" };

pages.volumes = {
  async load(params, index, signal) {
    const notes = [];
    const vols = await api(blocking("/v1/volumes", index), { signal });
    const [retry, nodes] = await Promise.all([
      optional("/v1/system/release-status", signal, notes),
      optional("/v1/nodes", signal, notes),
    ]);
    return { index: vols.index, data: { vols: vols.body, retry: retry || {}, nodes }, notes };
  },
  render({ vols, retry, nodes }) {
    const rows = vols.map((v) => ({ v, r: retry[v.id], state: releaseState(v, retry[v.id]), claims: claimsOf(v) }));
    // Volumes a failed fence leaves possibly written on a node first
    // (issue 39), then stuck and failing releases (most attempts first),
    // releases in progress, volumes in use, free volumes; by ID within.
    const fenceFailed = (v) => ((v.fence_failures || []).length ? 0 : 1);
    rows.sort((a, b) => fenceFailed(a.v) - fenceFailed(b.v) || STATE_RANK[a.state] - STATE_RANK[b.state] ||
      ((b.r && b.r.attempts) || 0) - ((a.r && a.r.attempts) || 0) || a.v.id.localeCompare(b.v.id));
    const f = volumeFilters;
    const shown = rows.filter(({ v, state, claims }) =>
      (!f.q || v.id.toLowerCase().includes(f.q.toLowerCase())) &&
      (!f.plugin || v.plugin_id === f.plugin) &&
      (!f.state || state === f.state) &&
      (!f.node || claims.some((c) => c.node_id === f.node)));

    const plugins = [...new Set(vols.map((v) => v.plugin_id))].sort();
    const nodeIDs = [...new Set(rows.flatMap((r) => r.claims.map((c) => c.node_id)))].sort();
    const select = (id, label, key, options) => h("label", { for: id }, label,
      h("select", { id, onchange: (e) => { f[key] = e.target.value; rerender(); } },
        h("option", { value: "" }, "any"),
        options.map(([val, text]) => h("option", { value: val, selected: f[key] === val }, text))));
    const filters = h("form", { class: "filters", role: "search", onsubmit: (e) => e.preventDefault() },
      h("label", { for: "vol-search" }, "Search ID",
        h("input", { id: "vol-search", type: "search", value: f.q, oninput: (e) => { f.q = e.target.value; rerender(); } })),
      select("vol-plugin", "Plugin", "plugin", plugins.map((p) => [p, p])),
      select("vol-node", "Node", "node", nodeIDs.map((n) => [n, nodeName(nodes, n)])),
      select("vol-state", "State", "state", ["failing", "releasing", "in-use", "free"].map((s) => [s, s])));

    const trs = shown.map(({ v, r, state, claims }) => {
      const count = (k) => claims.filter((c) => c.kind === k).length;
      return h("tr", { "data-volume": v.id, "data-state": state, class: "state-" + state },
        h("th", { scope: "row" }, link("#/volume/" + encodeURIComponent(v.id), v.id)),
        h("td", {}, v.plugin_id),
        h("td", {}, v.access_mode),
        h("td", {}, count("live") + " live / " + count("past") + " releasing"),
        h("td", {}, badge(state, STATE_KIND[state]),
          (v.fence_failures || []).length ? [" ", h("span", { class: "badge bad", "data-fence-failed": "" }, "fence failed")] : ""),
        h("td", { class: "attempts" }, r ? String(r.attempts) : "—"),
        h("td", { class: "last-error" }, r ? r.last_error : "—"),
        h("td", { class: "next-try" }, r ? h("time", { datetime: r.next_try, title: fmtTime(r.next_try) }, fmtRelative(r.next_try)) : "—"));
    });
    let rerender = () => {};
    const out = h("section", { "aria-labelledby": "h-volumes" },
      h("h1", { id: "h-volumes" }, "Volumes"),
      filters,
      h("p", { class: "muted" }, shown.length + " of " + vols.length + " volumes; stuck and failing releases first."),
      table("Volumes", ["ID", "Plugin", "Access mode", "Claims", "State", "Attempts", "Last error", "Next try"], trs, { id: "volumes" }));
    rerender = () => {
      const focusID = document.activeElement && document.activeElement.id;
      const view = pages.volumes.render({ vols, retry, nodes });
      out.replaceWith(view);
      const el = focusID && document.getElementById(focusID);
      if (el) { el.focus(); if (el.type === "search") el.setSelectionRange(el.value.length, el.value.length); }
    };
    return out;
  },
};

const STEP_RANK = { taken: 0, unpublishing: 1, "node-detached": 2, "controller-detached": 3, freed: 4 };

// releasePath says how a claim got past its node detach (structs.ReleasePath).
function releasePath(c) {
  if (c.fenced) return "fenced";
  if (c.node_detach_skipped) return "forced";
  if ((STEP_RANK[c.state] || 0) >= STEP_RANK["node-detached"]) return "node-detach";
  return "";
}

const PATH_LABEL = {
  fenced: "fenced: the node's lease ran out and it unmounted on its own",
  forced: "forced: an operator skipped the node detach",
  "node-detach": "node detach: the node unmounted",
};

function timeline(c) {
  const items = [];
  for (const s of c.steps || []) {
    if (c.fenced && s.state === "node-detached" && c.lease_expired_at) {
      // The moment the lease ran out comes before the fenced checkpoint.
      items.push(h("li", { "data-step": "lease-ran-out" }, h("strong", {}, "node's lease ran out"), " ",
        h("time", { datetime: c.lease_expired_at }, fmtTime(c.lease_expired_at))));
    }
    items.push(h("li", { "data-step": s.state },
      h("strong", {}, STEP_LABEL[s.state] || s.state), " ",
      h("span", { class: "muted" }, "index " + s.index + ", "),
      h("time", { datetime: s.time }, fmtTime(s.time))));
  }
  const path = releasePath(c);
  const out = [h("ol", { class: "timeline", "aria-label": "Release timeline of " + c.alloc_id }, items)];
  if (path) out.push(h("p", { class: "path", "data-path": path }, "Path: " + PATH_LABEL[path]));
  return out;
}

// storageSection is what the storage says of a volume, from its plugin's
// last reconciliation round.
function storageSection(v, report) {
  const out = h("section", { class: "storage", "aria-labelledby": "h-storage" }, h("h2", { id: "h-storage" }, "Storage"));
  if (!report) {
    out.append(h("p", { class: "muted" }, "Not reconciled yet."));
    return out;
  }
  const mine = (report.findings || []).filter((f) => f.volume_id === v.id);
  if (report.unsupported && !mine.length) out.append(h("p", { class: "muted" }, "Not compared: " + report.unsupported));
  else if (!mine.length) out.append(h("p", { "data-storage": "agrees" }, badge("agrees", "ok"), " with the record (checked ", fmtTime(report.checked_at), ")"));
  else {
    out.append(h("p", { "data-storage": "disagrees" }, badge("disagrees", "bad"), " with the record (checked ", fmtTime(report.checked_at), ")"));
    out.append(table("Storage findings", ["Finding", "Node", "Alloc", "What the storage says", "First seen"],
      mine.map((f) => h("tr", { "data-finding": f.kind },
        h("th", { scope: "row" }, f.kind), h("td", {}, f.node_id || f.external_node_id || "—"),
        h("td", {}, f.alloc_id || "—"), h("td", {}, f.message || "—"), h("td", {}, fmtTime(f.first_seen))))));
  }
  if (report.error) out.append(h("p", { class: "stuck" }, "Last round failed: " + report.error));
  if ((v.repairs || []).length) {
    out.append(table("Orphan attachments detached", ["Node", "Found", "Detached"],
      v.repairs.slice().reverse().map((r) => h("tr", { "data-repair": r.external_node_id },
        h("td", {}, r.node_id || r.external_node_id), h("td", {}, fmtTime(r.first_seen)), h("td", {}, fmtTime(r.at))))));
  }
  return out;
}

// fenceWhat says what failed in a node's fence (structs.FenceFailure.What).
function fenceWhat(f) {
  const what = f.hook_ok ? "unmount failed" : "fence command failed";
  return f.error ? what + ": " + f.error : what;
}

pages.volume = {
  keepError: true,
  async load(params, index, signal) {
    const notes = [];
    const vol = await api(blocking("/v1/volume/" + encodeURIComponent(params.id), index), { signal });
    const [evals, retry, nodes, reports] = await Promise.all([
      optional("/v1/evals?volume=" + encodeURIComponent(params.id), signal, notes),
      optional("/v1/system/release-status", signal, notes),
      optional("/v1/nodes", signal, notes),
      optional("/v1/storage/reports?plugin=" + encodeURIComponent(vol.body.plugin_id), signal, notes),
    ]);
    // Usage is asked of the nodes live; only a claimed volume has any.
    const usage = claimsOf(vol.body).some((c) => c.kind !== "past")
      ? await optional("/v1/volume/" + encodeURIComponent(params.id) + "/usage", signal, notes) : null;
    return { index: vol.index, data: { v: vol.body, evals: evals || [], retry: (retry || {})[params.id], nodes, report: (reports || [])[0], usage }, notes };
  },
  render({ v, evals, retry, nodes, report, usage }) {
    const claims = claimsOf(v);
    const out = h("section", { "aria-labelledby": "h-volume" },
      h("h1", { id: "h-volume" }, "Volume ", v.id),
      h("dl", { class: "facts" },
        h("dt", {}, "Name"), h("dd", {}, v.name || "—"),
        h("dt", {}, "Plugin"), h("dd", {}, v.plugin_id),
        h("dt", {}, "External ID"), h("dd", {}, v.external_id),
        h("dt", {}, "Access / attachment"), h("dd", {}, v.access_mode + " / " + v.attachment_mode),
        h("dt", {}, "In use as"), h("dd", {}, v.current_access_mode || "—"),
        h("dt", {}, "Node lost"), h("dd", { "data-node-lost": v.node_lost || "wait" }, v.node_lost || "wait"),
        h("dt", {}, "Health"), h("dd", { "data-health": (v.fence_failures || []).length ? "abnormal" : "healthy" },
          (v.fence_failures || []).length ? badge("abnormal", "bad") : badge("healthy", "ok")),
        h("dt", {}, "Secrets"), h("dd", {}, Object.keys(v.secrets || {}).length + " (never shown)"),
        h("dt", {}, "Raft index"), h("dd", {}, "created " + v.create_index + ", modified " + v.modify_index)));
    // A node's failed fence (issue 39): the volume may still be written
    // there, whatever its claims say.
    for (const f of v.fence_failures || []) {
      out.append(h("p", { class: "stuck", role: "alert", "data-fence-failed": f.node_id + "/" + f.alloc_id },
        badge("fence failed", "bad"), " may still be written on node ", nodeLink(nodes, f.node_id),
        " (alloc " + f.alloc_id + "): " + fenceWhat(f) + "; fence started ", h("time", { datetime: f.fenced_at }, fmtTime(f.fenced_at)), "."));
    }
    if (retry) {
      out.append(h("p", { class: "stuck" }, badge("release failing", "bad"), " ", retry.attempts + " attempts; last error: ",
        h("span", { class: "last-error" }, retry.last_error), "; next try ", fmtRelative(retry.next_try)));
    }
    const detach = async (node, btn) => {
      btn.disabled = true;
      try {
        await api("/v1/volume/" + encodeURIComponent(v.id) + "/detach?node=" + encodeURIComponent(node), { method: "POST" });
        setError("");
        document.getElementById("main").prepend(h("p", { class: "note", role: "status" }, "Detach of " + v.id + " from " + nodeName(nodes, node) + " requested."));
      } catch (err) {
        setError(describe(err));
      } finally {
        btn.disabled = false;
      }
    };
    out.append(table("Claims (live and being released)", ["Alloc", "Node", "Mode", "State", "Timeline", "Action"],
      claims.map((c) => h("tr", { "data-claim": c.alloc_id, "data-state": c.state },
        h("th", { scope: "row" }, link("#/alloc/" + encodeURIComponent(c.alloc_id), c.alloc_id)),
        h("td", {}, nodeLink(nodes, c.node_id)),
        h("td", {}, c.mode),
        h("td", {}, badge(c.state, c.kind === "past" ? "warn" : "ok"), c.node_detach_skipped ? " (node detach skipped)" : "",
          c.kind === "past" && retry && retry.lease_expires_at && !c.fenced ? [" (node's lease runs out ", fmtRelative(retry.lease_expires_at), ")"] : ""),
        h("td", {}, timeline(c)),
        h("td", {}, h("button", { type: "button", class: "detach", onclick: (e) => detach(c.node_id, e.target) }, "Detach from node"))))));
    out.append(table("Recently freed claims", ["Alloc", "Node", "Mode", "Timeline"],
      (v.released || []).slice().reverse().map((c) => h("tr", { "data-released": c.alloc_id },
        h("th", { scope: "row" }, link("#/alloc/" + encodeURIComponent(c.alloc_id), c.alloc_id)),
        h("td", {}, nodeLink(nodes, c.node_id)), h("td", {}, c.mode), h("td", {}, timeline(c))))));
    if ((usage || []).length) {
      out.append(table("Usage (as the nodes report it now)", ["Node", "Alloc", "Used", "Available", "Total"],
        usage.map((u) => h("tr", { "data-usage": u.alloc_id },
          h("td", {}, nodeLink(nodes, u.node_id)), h("td", {}, u.alloc_id),
          ...(u.error ? [h("td", { colspan: "3" }, u.error)]
            : [h("td", {}, fmtBytes(u.bytes_used)), h("td", {}, fmtBytes(u.bytes_available)), h("td", {}, fmtBytes(u.bytes_total))])))));
    }
    out.append(storageSection(v, report));
    out.append(evalTable("Evals of this volume", evals));
    return out;
  },
};

function evalTable(caption, evals) {
  return table(caption, ["ID", "Volume", "Status", "Reason", "Triggered by", "Raft index"],
    evals.map((e) => h("tr", { "data-eval": e.id, "data-status": e.status },
      h("th", { scope: "row" }, h("code", {}, e.id.slice(0, 8))),
      h("td", {}, link("#/volume/" + encodeURIComponent(e.volume_id), e.volume_id)),
      h("td", {}, badge(e.status, e.status === "failed" ? "bad" : e.status === "pending" ? "warn" : "ok")),
      h("td", {}, e.status_description || "—"),
      h("td", {}, e.triggered_by || "—"),
      h("td", {}, e.create_index + " → " + e.modify_index))));
}

pages.evals = {
  async load(params, index, signal) {
    const r = await api(blocking("/v1/evals", index), { signal });
    return { index: r.index, data: r.body };
  },
  render(evals) {
    const out = h("section", { "aria-labelledby": "h-evals" }, h("h1", { id: "h-evals" }, "Evals"));
    for (const st of ["pending", "failed", "complete"]) {
      out.append(evalTable(st[0].toUpperCase() + st.slice(1), evals.filter((e) => e.status === st).sort((a, b) => b.modify_index - a.modify_index)));
    }
    return out;
  },
};

function capabilityList(caps) {
  const on = Object.entries(caps || {}).filter(([, v]) => v).map(([k]) => k.replace(/_/g, " "));
  return on.length ? on.join(", ") : "—";
}

pages.nodes = {
  keepError: true,
  async load(params, index, signal, cursor) {
    // Live on all three tables the cards show state from (Sources).
    const src = await sourcesRound({
      nodes: { path: "/v1/nodes" },
      allocs: { path: "/v1/allocs", optional: true },
      vols: { path: "/v1/volumes", optional: true },
    }, index, signal, cursor);
    const notes = src.notes();
    const plugins = await optional("/v1/plugins", signal, notes);
    return { index: src.index(), cursor: src, data: { nodes: src.body("nodes"), plugins: plugins || [], allocs: src.body("allocs") || [], vols: src.body("vols") || [] }, notes };
  },
  render({ nodes, plugins, allocs, vols }, params) {
    const out = h("section", { "aria-labelledby": "h-nodes" }, h("h1", { id: "h-nodes" }, "Nodes"));
    const shown = params.id ? nodes.filter((n) => n.id === params.id) : nodes;
    for (const n of shown) {
      const held = vols.filter((v) => claimsOf(v).some((c) => c.node_id === n.id));
      const card = h("article", { class: "card", "data-node": n.id, "aria-labelledby": "node-" + n.id },
        h("h2", { id: "node-" + n.id }, n.name, " ", badge(n.status, n.status === "ready" ? "ok" : "bad"), " ",
          badge(n.eligibility === "ineligible" ? "ineligible" : "eligible", n.eligibility === "ineligible" ? "warn" : "")),
        h("p", { class: "muted" }, h("code", {}, n.id), " · lease ", n.lease ? fmtDuration(n.lease) : "none"));
      card.append(nodeActions(n, held));
      if (n.last_fence) card.append(fenceTable(n));
      const pl = Object.values(n.csi_node_plugins || {}).map((p) => ["node", p])
        .concat(Object.values(n.csi_controller_plugins || {}).map((p) => ["controller", p]));
      card.append(table("Plugins on " + n.name, ["Plugin", "Type", "Health", "Capabilities"],
        pl.map(([type, p]) => h("tr", {},
          h("td", {}, p.plugin_id), h("td", {}, type),
          h("td", {}, p.healthy ? badge("healthy", "ok") : badge("unhealthy", "bad"), " ", p.health_description || ""),
          h("td", {}, capabilityList(type === "node" ? p.node_capabilities : p.controller_capabilities))))));
      card.append(h("p", {}, h("strong", {}, "Allocs: "),
        allocs.filter((a) => a.node_id === n.id).map((a, i) => [i ? ", " : "", link("#/alloc/" + encodeURIComponent(a.id), a.id), " (" + a.client_status + ")"]),
        h("br"), h("strong", {}, "Volumes claimed: "),
        held.length ? held.map((v, i) => [i ? ", " : "", link("#/volume/" + encodeURIComponent(v.id), v.id)]) : "none"));
      out.append(card);
    }
    out.append(h("h1", { id: "h-plugins" }, "Plugins"));
    out.append(table("Plugins", ["ID", "Provider", "Controllers healthy", "Nodes healthy", "Controller capabilities", "Node capabilities", "Controllers pending admission"],
      plugins.map((p) => h("tr", { "data-plugin": p.id },
        h("th", { scope: "row" }, p.id),
        h("td", {}, p.provider + " " + (p.provider_version || "")),
        h("td", {}, p.controller_required ? p.controllers_healthy + " / " + Object.keys(p.controllers || {}).length : "not required"),
        h("td", {}, p.nodes_healthy + " / " + Object.keys(p.nodes || {}).length),
        h("td", {}, capabilityList(p.controller_capabilities)),
        h("td", {}, capabilityList(p.node_capabilities)),
        // A pending controller receives no call until an operator runs
        // claimd plugin admit (issue 38).
        h("td", { "data-pending": String(p.controllers_pending || 0) }, pendingControllers(p))))));
    return out;
  },
};
pages.node = pages.nodes;

// pendingControllers names the plugin's controllers that wait for an
// admission, with their health, or "none".
function pendingControllers(p) {
  const pending = Object.keys(p.controllers || {}).filter((id) => !(p.admissions || {})[id]).sort();
  if (!pending.length) return "none";
  return pending.map((id, i) => [i ? ", " : "", badge(id + " (pending)", "bad")]);
}

// fmtDuration renders a Go duration in nanoseconds ("30s").
function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

function fmtDuration(ns) {
  const s = ns / 1e9;
  return s >= 60 && s % 60 === 0 ? s / 60 + "m" : s + "s";
}

function fenceTable(n) {
  const f = n.last_fence;
  return table("Last fence on " + n.name + ", begun " + fmtTime(f.at), ["Alloc", "Volume", "Fence command", "Unmounted", "Error"],
    (f.volumes || []).map((v) => h("tr", { "data-fenced": v.volume_id },
      h("td", {}, v.alloc_id), h("td", {}, link("#/volume/" + encodeURIComponent(v.volume_id), v.volume_id)),
      h("td", {}, v.hook_ok ? badge("ok", "ok") : badge("failed", "bad")),
      h("td", {}, v.unmounted ? badge("yes", "ok") : badge("no", "bad")),
      h("td", {}, v.error || "—"))));
}

// drainPreview is the dry-run plan shown for a node until it is confirmed
// or cancelled; it lives outside the page so live re-renders keep it.
let drainPreview = null; // { node: id, plan }

// nodeActions: drain (a dry run shown first, then confirmed) and the
// eligibility toggle.
function nodeActions(n, held) {
  const box = h("div", { class: "actions" });
  const note = (text) => document.getElementById("main").prepend(h("p", { class: "note", role: "status" }, text));
  const post = async (path, btn) => {
    btn.disabled = true;
    try {
      const r = await api(path, { method: "POST" });
      setError("");
      return r.body;
    } catch (err) {
      setError(describe(err));
      return null;
    } finally {
      btn.disabled = false;
    }
  };
  const base = "/v1/node/" + encodeURIComponent(n.id);
  const showPlan = (plan) => {
    const old = box.parentNode && box.parentNode.querySelector(".drain-plan");
    if (old) old.remove();
    const preview = h("div", { class: "drain-plan", role: "dialog", "aria-label": "Drain plan for " + n.name },
      h("p", {}, "Draining " + n.name + " stops " + (plan.allocs || []).length + " allocations and releases " + (plan.volumes || []).length + " claims, in this order:"),
      table("Drain plan", ["Order", "Volume", "Alloc", "Steps"],
        (plan.volumes || []).map((v, i) => h("tr", { "data-plan-volume": v.volume_id },
          h("td", {}, String(i + 1)), h("td", {}, v.volume_id), h("td", {}, v.alloc_id), h("td", {}, v.steps.join(", then "))))),
      h("p", {}, "Node plugins that must keep serving until it is done: " + ((plan.plugins_keep_up || []).join(", ") || "none")),
      (plan.blockers || []).length ? h("ul", { class: "blockers" }, plan.blockers.map((b) => h("li", {}, b))) : h("p", { class: "muted" }, "Nothing blocks it now."),
      h("button", { type: "button", class: "drain-confirm", onclick: async (ev) => {
        const done = await post(base + "/drain", ev.target);
        if (done) {
          drainPreview = null;
          preview.remove();
          note("Drain of " + n.name + " started: its claims are released in order; it is done when no volume is claimed here.");
        }
      } }, "Drain now"), " ",
      h("button", { type: "button", onclick: () => { drainPreview = null; preview.remove(); } }, "Cancel"));
    return preview;
  };
  const drain = h("button", { type: "button", class: "drain", onclick: async (e) => {
    const res = await post(base + "/drain?dry-run", e.target);
    if (!res) return;
    drainPreview = { node: n.id, plan: res.plan };
    box.after(showPlan(res.plan));
  } }, "Drain…");
  const ineligible = n.eligibility === "ineligible";
  const toggle = h("button", { type: "button", class: "eligibility", onclick: async (e) => {
    if (await post(base + "/eligibility?eligible=" + (ineligible ? "true" : "false"), e.target)) {
      note(n.name + " is now " + (ineligible ? "eligible" : "ineligible") + " for new claims.");
    }
  } }, ineligible ? "Make eligible" : "Make ineligible");
  box.append(drain, " ", toggle);
  if (ineligible && !held.length) box.append(" ", badge("drained: its node plugins may be stopped", "ok"));
  if (drainPreview && drainPreview.node === n.id) {
    // Re-rendered: the card is built before it is in the page.
    const wrap = h("div", {}, box, showPlan(drainPreview.plan));
    return wrap;
  }
  return box;
}

pages.allocs = {
  async load(params, index, signal, cursor) {
    // The claim state shown per volume is the volumes' (Sources); node
    // names are only names.
    const src = await sourcesRound({
      allocs: { path: "/v1/allocs" },
      vols: { path: "/v1/volumes", optional: true },
    }, index, signal, cursor);
    const notes = src.notes();
    const nodes = await optional("/v1/nodes", signal, notes);
    return { index: src.index(), cursor: src, data: { allocs: src.body("allocs"), vols: src.body("vols") || [], nodes }, notes };
  },
  render({ allocs, vols, nodes }, params) {
    const shown = params.id ? allocs.filter((a) => a.id === params.id) : allocs;
    const claimOf = (volID, allocID) => {
      const v = vols.find((x) => x.id === volID);
      if (!v) return null;
      return claimsOf(v).find((c) => c.alloc_id === allocID) || (v.released || []).find((c) => c.alloc_id === allocID);
    };
    return h("section", { "aria-labelledby": "h-allocs" }, h("h1", { id: "h-allocs" }, params.id ? "Alloc " + params.id : "Allocs"),
      table("Allocs", ["ID", "Node", "Desired", "Status", "Volumes held (claim state)"],
        shown.map((a) => h("tr", { "data-alloc": a.id },
          h("th", { scope: "row" }, link("#/alloc/" + encodeURIComponent(a.id), a.id)),
          h("td", {}, nodeLink(nodes, a.node_id)),
          h("td", {}, a.desired_status),
          h("td", {}, badge(a.client_status, a.client_status === "failed" ? "bad" : a.client_status === "running" ? "ok" : ""), " ", a.client_description || ""),
          h("td", {}, (a.volumes || []).map((r, i) => {
            const c = claimOf(r.volume_id, a.id);
            return [i ? ", " : "", link("#/volume/" + encodeURIComponent(r.volume_id), r.volume_id),
              " (" + (c ? c.state : "no claim") + (r.read_only ? ", read-only" : "") + ")"];
          }))))));
  },
};
pages.alloc = pages.allocs;

// ---- routing: #/page or #/page/id ----

function route() {
  const m = /^#\/([a-z]+)(?:\/(.+))?$/.exec(location.hash);
  const name = m && pages[m[1]] ? m[1] : "volumes";
  const params = { id: m && m[2] ? decodeURIComponent(m[2]) : "" };
  const top = { volume: "volumes", node: "nodes", alloc: "allocs" }[name] || name;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.page === top) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = "claimd · " + name + (params.id ? " " + params.id : "");
  setError("");
  live(pages[name], params);
}

// tokenFromFragment takes a token given in the page's address as
// #token=SECRET (a script or a headless browser cannot type it): the
// fragment never leaves the browser, so the server and its logs never see
// it, and it is replaced at once, out of the history, by the page it
// names (#token=SECRET&page=/volume/pgdata, default the volumes page).
function tokenFromFragment() {
  const m = /^#token=([^&]+)(?:&page=(\/[^&]*))?$/.exec(location.hash);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]).trim());
  history.replaceState(null, "", location.pathname + location.search + "#" + (m[2] || "/volumes"));
}

function init() {
  tokenFromFragment();
  const form = document.getElementById("token-form");
  const input = document.getElementById("token-input");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    showTokenState();
    route();
  });
  document.getElementById("token-clear").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showTokenState();
    route();
  });
  // The skip link moves the focus to the page's content; the hash is the
  // router's, so it must not change.
  document.querySelector(".skip").addEventListener("click", (e) => {
    e.preventDefault();
    document.getElementById("main").focus();
  });
  window.addEventListener("hashchange", () => {
    route();
    document.getElementById("main").focus();
  });
  showTokenState();
  route();
}

document.addEventListener("DOMContentLoaded", init);
