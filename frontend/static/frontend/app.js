// evalhub dashboard: live progress, auto-submitting filters, confirmations, copy. No build step.
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

function setBadge(el, status) {
  if (!el) return;
  el.textContent = status;
  el.className = el.className.replace(/badge-\w+/, "badge-" + status);
}

async function getJSON(url) {
  const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!r.ok) throw new Error(url + ": " + r.status);
  return r.json();
}

// The job page: poll the job's progress; when seeds finish, re-render the results section
// from the server (same URL, same filters) without reloading the page.
function watchJob(root) {
  let last = null;
  let refreshedAt = Date.now();
  const refreshMs = Number(root.dataset.refreshMs || POLL_MS);
  async function refreshResults() {
    const r = await fetch(window.location.href, { credentials: "same-origin" });
    if (!r.ok) return;
    const doc = new DOMParser().parseFromString(await r.text(), "text/html");
    document.querySelectorAll("[data-live-region]").forEach((old) => {
      const fresh = doc.getElementById(old.id);
      if (fresh) old.replaceWith(fresh);
    });
  }
  async function tick() {
    let p;
    try {
      p = await getJSON(root.dataset.progressUrl);
    } catch (e) {
      setTimeout(tick, POLL_MS * 2);
      return;
    }
    setProgress(document.querySelector("[data-progress]"), p);
    setBadge(root.querySelector("[data-status-badge]"), p.status);
    for (const k of ["succeeded", "failed", "running", "pending", "cancelled"]) {
      const el = document.querySelector('[data-count="' + k + '"]');
      if (el) el.textContent = p[k];
    }
    const key = p.status + ":" + p.completed + ":" + p.running;
    const due = p.terminal || Date.now() - refreshedAt >= refreshMs;
    if (last !== null && key !== last && due) {
      await refreshResults();
      refreshedAt = Date.now();
      last = key;
    } else if (last === null) {
      last = key;
    }
    if (p.terminal) {
      document.querySelectorAll("[data-hide-when-terminal]").forEach((el) => el.remove());
      root.dataset.terminal = "1";
      return;
    }
    setTimeout(tick, POLL_MS);
  }
  if (root.dataset.terminal !== "1") setTimeout(tick, POLL_MS);
}

// The jobs list: poll the bars of the jobs on this page that are still going.
function watchJobList(table) {
  async function tick() {
    const rows = [...table.querySelectorAll("tr[data-job-id]")].filter(
      (tr) => !["completed", "failed", "cancelled"].includes(tr.dataset.status)
    );
    if (!rows.length) return;
    const url = table.dataset.liveJobs + "?ids=" + rows.map((tr) => encodeURIComponent(tr.dataset.jobId)).join(",");
    try {
      const data = await getJSON(url);
      for (const tr of rows) {
        const p = data.jobs[tr.dataset.jobId];
        if (!p) continue;
        setProgress(tr.querySelector("[data-progress]"), p);
        setBadge(tr.querySelector("[data-status-badge]"), p.status);
        tr.dataset.status = p.status;
      }
    } catch (e) {
      /* try again on the next tick */
    }
    setTimeout(tick, POLL_MS);
  }
  setTimeout(tick, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  const job = document.getElementById("job");
  if (job && job.dataset.progressUrl) watchJob(job);
  const jobs = document.querySelector("table[data-live-jobs]");
  if (jobs) watchJobList(jobs);

  document.addEventListener("submit", (e) => {
    const msg = e.target.dataset && e.target.dataset.confirm;
    if (msg && !window.confirm(msg)) e.preventDefault();
  });
  // Delegated: the live results section is replaced while the job runs.
  document.addEventListener("change", (e) => {
    const el = e.target;
    if (el.form && el.form.hasAttribute("data-autosubmit") && el.matches("select, input[type=checkbox]")) {
      el.form.requestSubmit();
    }
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
