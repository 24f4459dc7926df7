"""Following a job to its end: a live bar from the event stream (samples done, failed, mean so
far, cost so far, time left), then the summary. Without a terminal (CI logs) a plain line every
few seconds instead; with `--json`, the events as JSON lines and the summary last."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from evalhub_client.api import TERMINAL, Api
from evalhub_client.errors import CliError, Exit
from evalhub_client.output import console, money, number, table

POLL_S = 2.0
PLAIN_LINE_S = 5.0


class Tally:
    """What the bar shows, from the events and, every POLL_S, the job's status and summary."""

    def __init__(self, api: Api, job_id: str) -> None:
        self.api, self.job_id = api, job_id
        self.done, self.total, self.failed = 0, None, 0
        self.mean: float | None = None
        self.cost: float | None = None
        self.status = "pending"
        self.polled = 0.0

    def event(self, data: dict[str, Any]) -> None:
        self.done = max(self.done, int(data.get("completed") or 0))
        self.total = data.get("total") or self.total
        if data.get("seed_status") == "failed":
            self.failed += 1

    def poll(self, *, force: bool = False) -> None:
        if not force and time.monotonic() - self.polled < POLL_S:
            return
        self.polled = time.monotonic()
        job = self.api.call("GET", f"/eval/jobs/{self.job_id}", what=f"job {self.job_id}")
        progress = job.get("results") or {}
        self.status = job.get("status", self.status)
        self.done = max(self.done, int(progress.get("completed") or 0))
        self.total = progress.get("total") or self.total
        self.failed = int(progress.get("failed") or 0)
        self.mean = progress.get("mean_reward")
        self.cost = self.api.summary(self.job_id).get("total_cost_usd")

    def fields(self) -> dict[str, str]:
        return {"failed": str(self.failed), "mean": number(self.mean),
                "cost": money(self.cost)}  # fmt: skip


def job_follow(api: Api, job_id: str, *, as_json: bool) -> Exit:
    """Follow the job to its end; Exit.OK when it completed, Exit.JOB_FAILED otherwise."""
    try:
        return _follow(api, job_id, as_json=as_json)
    except KeyboardInterrupt:
        raise CliError(f"stopped watching; job {job_id} goes on (`evalhub watch {job_id}` to "
                       f"follow it again, `evalhub cancel {job_id}` to stop it)",
                       Exit.INTERRUPTED) from None  # fmt: skip


def _follow(api: Api, job_id: str, *, as_json: bool) -> Exit:
    tally = Tally(api, job_id)
    tally.poll(force=True)
    if as_json:
        for event in api.events(job_id):
            sys.stdout.write(
                json.dumps({"seq": event.seq, "type": event.type, "data": event.data}) + "\n"
            )
            sys.stdout.flush()
    elif console.is_terminal:
        _follow_bar(api, tally)
    else:
        _follow_plain(api, tally)
    tally.poll(force=True)
    while tally.status not in TERMINAL:  # the stream ended first (a proxy cut it): ask again
        time.sleep(POLL_S)
        tally.poll(force=True)
    summary_show(api, job_id, status=tally.status, as_json=as_json)
    return Exit.OK if tally.status == "completed" else Exit.JOB_FAILED


def _follow_bar(api: Api, tally: Tally) -> None:
    columns = (
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("failed {task.fields[failed]}"), TextColumn("mean {task.fields[mean]}"),
        TextColumn("cost ${task.fields[cost]}"), TimeRemainingColumn(),
    )  # fmt: skip
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(tally.job_id, total=tally.total, completed=tally.done, **tally.fields())
        for event in api.events(tally.job_id):
            tally.event(event.data)
            tally.poll()
            bar.update(task, total=tally.total, completed=tally.done, **tally.fields())
        tally.poll(force=True)
        bar.update(task, total=tally.total, completed=tally.done, **tally.fields())


def _follow_plain(api: Api, tally: Tally) -> None:
    said = 0.0
    for event in api.events(tally.job_id):
        tally.event(event.data)
        tally.poll()
        if time.monotonic() - said >= PLAIN_LINE_S:
            said = time.monotonic()
            f = tally.fields()
            console.print(f"{tally.job_id}: {tally.done}/{tally.total} samples, failed "
                          f"{f['failed']}, mean {f['mean']}, cost ${f['cost']}",
                          soft_wrap=True, highlight=False)  # fmt: skip


SUMMARY_FIGURES = (
    ("mean score", "mean_score", ".4f"), ("95% interval", "mean_score_ci95", ".4f"),
    ("pass rate", "pass_rate", ".3f"), ("samples", "num_samples", "d"),
    ("succeeded", "num_successful", "d"), ("failed", "num_failed", "d"),
    ("tokens", "total_tokens", "d"), ("cost (USD)", "total_cost_usd", "$"),
    ("latency p50 (ms)", "latency_p50_ms", ".0f"), ("latency p95 (ms)", "latency_p95_ms", ".0f"),
)  # fmt: skip
# Shown for a job whose calls were answered from a recording or a cache (docs/replay.md).
REPLAY_FIGURES = (
    ("replayed calls", "replayed_calls", "d"), ("live calls", "live_calls", "d"),
    ("divergences", "divergences", "d"), ("replayed cost (USD)", "replayed_cost_usd", "$"),
)  # fmt: skip


def summary_show(api: Api, job_id: str, *, status: str, as_json: bool) -> None:
    summary = api.summary(job_id)
    if as_json:
        sys.stdout.write(
            json.dumps({"job_id": job_id, "status": status, "summary": summary}) + "\n"
        )
        return
    figures = SUMMARY_FIGURES
    if summary.get("replayed_calls") or summary.get("divergences"):
        figures += REPLAY_FIGURES
    rows = [[label, number(summary.get(key), spec)] for label, key, spec in figures]
    console.print(f"Job {job_id} {status}", soft_wrap=True)
    console.print(table(None, ["figure", "value"], rows))
