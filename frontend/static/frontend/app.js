// evalhub dashboard: live figures, auto-submitting filters, confirmations, copy. No build step.
"use strict";

const POLL_MS = 2000;

function setProgress(el, p) {
  if (!el) return;
  el.setAttribute("aria-valuenow", String(p.completed));
  el.setAttribute("aria-valuemax", String(p.total));
  el.querySelector(".progress-ok").style.width = p.percent_succeeded + "%";
  el.querySelector(".progress-failed").style.width = p.percent_failed + "%";
  el.querySelector("[data-done]").textContent = p.completed;
  el.querySelector("[data-total]").textContent = p.total;
  let fails = el.querySelector(".progress-fails");
  if (p.failed && !fails) {
    fails = document.createElement("span");
    fails.className = "progress-fails";
    el.querySelector(".progress-text").append(" ", fails);
  }
  if (fails) fails.textContent = p.failed ? "(" + p.failed + " failed)" : "";
}

// `shown` is the status as the badge reads it (frontend/live.py status_shown).
function setBadge(el, shown) {
  if (!el || !shown) return;
  el.textContent = shown.text;
  el.className = el.className.replace(/badge-\w+/, "badge-" + shown.badge);
  if (shown.title) el.title = shown.title;
  else el.removeAttribute("title");
}

async function getJSON(url) {
  const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!r.ok) throw new Error(url + ": " + r.status);
  return r.json();
}

// Live updates. Each job's server-sent event stream (/api/eval/jobs/<id>/events/stream, the
// one API clients use; the page's session signs it) says when something changed, and the page
// then fetches what it shows. Without a stream (no EventSource, a stream refused, too many jobs
// on the page) it polls every POLL_MS instead; with one it still looks every SAFETY_MS.
// `refresh` returns true when there is nothing more to follow, or a delay in ms to run again.
const SAFETY_MS = 10000;
const MAX_STREAMS = 3; // browsers open 6 connections per host: leave room for the fetches

function follow(streams, refresh) {
  const types = (document.body.dataset.eventTypes || "").split(",").filter(Boolean);
  const sources = [];
  let timer = null, busy = false, again = false, done = false, polling = false;
  function schedule(ms) {
    if (done) return;
    clearTimeout(timer);
    timer = setTimeout(run, ms);
  }
  async function run() {
    if (busy) { again = true; return; }
    busy = true;
    let next;
    try { next = await refresh(); } catch (e) { next = undefined; }
    busy = false;
    if (next === true) {
      done = true;
      clearTimeout(timer);
      sources.forEach((es) => es.close());
      return;
    }
    if (typeof next === "number") schedule(next);
    else if (again) schedule(200);
    else schedule(polling ? POLL_MS : SAFETY_MS);
    again = false;
  }
  function fallBack() {
    if (polling) return;
    polling = true;
    document.body.dataset.live = "poll";
    schedule(POLL_MS);
  }
  if (!window.EventSource || !streams.length || streams.length > MAX_STREAMS) {
    fallBack();
    return;
  }
  for (const s of streams) {
    const es = new EventSource(s.url + "?since_seq=" + encodeURIComponent(s.since || 0));
    sources.push(es);
    types.forEach((t) => es.addEventListener(t, () => schedule(150)));
    es.addEventListener("sse.stream.ended", () => { es.close(); schedule(0); });
    es.onopen = () => { if (!polling) document.body.dataset.live = "sse"; };
    es.onerror = () => { if (es.readyState === EventSource.CLOSED) fallBack(); };
  }
  schedule(SAFETY_MS);
}

// Every element marked data-figure="name" inside `scope` shows figures[name].
function setFigures(scope, figures) {
  if (!scope || !figures) return;
  scope.querySelectorAll("[data-figure]").forEach((el) => {
    const text = figures[el.dataset.figure];
    if (text !== undefined && el.textContent !== text) el.textContent = text;
  });
}

// The job page: on each change, the progress, counts, badge and figure cards (one small JSON)
// at once, and the results section (the figures of every row, charts, the seed table)
// re-rendered by the server, at most every refreshMs.
function watchJob(root) {
  let last = null;
  let refreshedAt = 0;
  const refreshMs = Number(root.dataset.refreshMs || POLL_MS);
  async function refreshResults() {
    const r = await fetch(window.location.href, { credentials: "same-origin" });
    if (!r.ok) return;
    const doc = new DOMParser().parseFromString(await r.text(), "text/html");
    document.querySelectorAll("[data-live-region]").forEach((old) => {
      const fresh = doc.getElementById(old.id);
      if (fresh) old.replaceWith(fresh);
    });
    refreshedAt = Date.now();
  }
  async function refresh() {
    const p = await getJSON(root.dataset.progressUrl);
    // The bar, the counts, the badge and the figure cards: one answer, drawn at once.
    setProgress(document.querySelector("[data-progress]"), p);
    setBadge(root.querySelector("[data-status-badge]"), p.shown);
    for (const k of ["succeeded", "failed", "running", "pending", "cancelled"]) {
      const el = document.querySelector('[data-count="' + k + '"]');
      if (el) el.textContent = p[k];
    }
    const cancelled = document.querySelector('[data-count-of="cancelled"]');
    if (cancelled) cancelled.hidden = !p.cancelled;
    setFigures(document.querySelector("[data-live-figures]"), p.figures);
    if (p.terminal) document.querySelectorAll("[data-hide-when-terminal]").forEach((el) => el.remove());
    const key = p.status + ":" + p.completed + ":" + p.running;
    if (key !== last) {
      const wait = refreshMs - (Date.now() - refreshedAt);
      if (!p.terminal && wait > 0) return wait; // the same change, a little later
      await refreshResults();
      last = key;
    }
    if (p.terminal) {
      root.dataset.terminal = "1";
      return true;
    }
  }
  if (root.dataset.terminal === "1") return;
  last = null;
  refreshedAt = Date.now();
  follow([{ url: root.dataset.stream, since: root.dataset.eventSeq }], refresh);
}

// The jobs list: the bars and figures of the jobs on this page that are still going.
function watchJobList(table) {
  const live = () => [...table.querySelectorAll("tr[data-job-id]")].filter(
    (tr) => !["completed", "failed", "cancelled"].includes(tr.dataset.status)
  );
  const rows = live();
  if (!rows.length) return;
  async function refresh() {
    const going = live();
    if (!going.length) return true;
    const url = table.dataset.liveJobs + "?ids=" + going.map((tr) => encodeURIComponent(tr.dataset.jobId)).join(",");
    const data = await getJSON(url);
    for (const tr of going) {
      const p = data.jobs[tr.dataset.jobId];
      if (!p) continue;
      setProgress(tr.querySelector("[data-progress]"), p);
      setBadge(tr.querySelector("[data-status-badge]"), p.shown);
      setFigures(tr, p.figures);
      tr.dataset.status = p.status;
    }
    return live().length ? undefined : true;
  }
  follow(rows.map((tr) => ({ url: tr.dataset.stream, since: tr.dataset.eventSeq })), refresh);
}

// Keys between seeds (the seed page, the side-by-side page): each goes where a link of the page
// goes, so a key does nothing the page does not offer. Not while typing, nor with a modifier.
const SEED_KEYS = {
  j: "a[rel='next']", ArrowRight: "a[rel='next']",
  k: "a[rel='prev']", ArrowLeft: "a[rel='prev']",
  f: "a[data-next-failure]", t: "a[data-seed-table]",
};

function seedKeys(nav) {
  document.addEventListener("keydown", (e) => {
    if (e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
    const target = e.target;
    if (target.closest && target.closest("input, textarea, select, [contenteditable]")) return;
    const selector = SEED_KEYS[e.key];
    const link = selector && nav.querySelector(selector);
    if (!link) return;
    e.preventDefault();
    link.click();
  });
  keysReady();
}

// The keys answer from here on: the page is drawn before its deferred script runs, and a key
// pressed in between does nothing. Tests wait for this mark before they press.
function keysReady() {
  document.documentElement.dataset.keys = "ready";
}

document.addEventListener("DOMContentLoaded", () => {
  const seedNav = document.querySelector("[data-seed-keys]");
  if (seedNav) seedKeys(seedNav);
  const job = document.getElementById("job");
  if (job && job.dataset.progressUrl) watchJob(job);
  const jobs = document.querySelector("table[data-live-jobs]");
  if (jobs) watchJobList(jobs);

  document.addEventListener("submit", (e) => {
    const msg = e.target.dataset && e.target.dataset.confirm;
    if (msg && !window.confirm(msg)) e.preventDefault();
  });
  // A filter form leaves out its empty fields: `?status=failed`, not `?status=failed&q=&tag=`.
  document.addEventListener("submit", (e) => {
    const form = e.target;
    if (e.defaultPrevented || !form.matches || !form.matches("form[data-autosubmit]")) return;
    e.preventDefault();
    const params = new URLSearchParams();
    for (const [name, value] of new FormData(form)) if (value !== "") params.append(name, value);
    const target = new URL(form.action);  // keeps an anchor such as #seeds
    target.search = params.toString();
    window.location.assign(target.toString());
  });
  // Delegated: the live results section is replaced while the job runs.
  document.addEventListener("change", (e) => {
    const el = e.target;
    if (el.form && el.form.hasAttribute("data-autosubmit") && el.matches("select, input[type=checkbox]")) {
      el.form.requestSubmit();
    }
  });
  // Copy the text of an element (a raw request or answer); delegated, as sections are replaced.
  document.addEventListener("click", async (e) => {
    const btn = e.target.closest && e.target.closest("[data-copy-text]");
    if (!btn) return;
    const text = document.querySelector(btn.dataset.copyText).textContent;
    try {
      await navigator.clipboard.writeText(text);
    } catch (err) {
      const area = document.createElement("textarea");
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    btn.textContent = "Copied";
  });
  document.querySelectorAll("[data-copy]").forEach((btn) =>
    btn.addEventListener("click", async () => {
      const input = document.querySelector(btn.dataset.copy);
      input.select();
      try {
        await navigator.clipboard.writeText(input.value);
        btn.textContent = "Copied";
      } catch (e) {
        document.execCommand("copy");
      }
    })
  );
});
