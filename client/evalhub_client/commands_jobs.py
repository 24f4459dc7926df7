"""Commands on one job or the list: login, submit, status, watch, cancel, rerun, replay,
jobs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from evalhub_client.api import Api, RequestRefused
from evalhub_client.config import Config, config_load, config_save, url_normalize
from evalhub_client.errors import CliError, Exit
from evalhub_client.jobfile import JobFile, first_field_error, job_file_read
from evalhub_client.output import (
    console,
    emit_json,
    job_line,
    json_option,
    number,
    state,
    table,
    warn,
)
from evalhub_client.progress import job_follow


@click.command()
@click.option("--url", help="The server's base URL (default: EVALHUB_URL, then the saved one).")
@click.option(
    "--api-key", help="An API key (made on the dashboard's Keys page); asked if not given."
)
@json_option
def login(url: str | None, api_key: str | None) -> None:
    """Check a server URL and API key, and save them for the next commands."""
    current = config_load(url=url or state().url)
    key = api_key or state().api_key or click.prompt("API key", hide_input=True)
    config = Config(url=url_normalize(url or current.url), api_key=key.strip())
    Api(config).call("GET", "/eval/jobs", params={"limit": 1})
    path = config_save(config)
    if state().json:
        emit_json({"url": config.url, "config": str(path)})
    else:
        console.print(f"Logged in to {config.url}; saved in {path}")


def _submit_refused(job_file: JobFile, exc: RequestRefused) -> CliError:
    field, message = first_field_error(exc.fields)
    if not field:
        return CliError(f"{job_file.path}: the server refused the job: {exc.message}", Exit.INVALID)
    return CliError(f"{job_file.where(field)}: {'.'.join(field)}: {message}", Exit.INVALID)


@click.command()
@click.argument("job_file", type=click.Path(path_type=Path))
@click.option("--watch", is_flag=True, help="Follow the job to its end with a progress bar.")
@click.option("--name", help="The job's name (overrides the file's).")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable; added to the file's).")
@click.option("--idempotency-key", help="Submitting again with this key returns the same job.")
@json_option
def submit(job_file: Path, watch: bool, name: str | None, tags: tuple[str, ...],
           idempotency_key: str | None) -> None:  # fmt: skip
    """Submit the job described in JOB_FILE (JSON or YAML: the body of POST /api/eval/jobs)."""
    parsed = job_file_read(job_file)
    body = dict(parsed.body)
    if name:
        body["name"] = name
    if tags:
        kept = body.get("tags") or []
        body["tags"] = [*([kept] if isinstance(kept, str) else kept), *tags]
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    api = state().api()
    try:
        job = api.call("POST", "/eval/jobs", json=body, headers=headers)
    except RequestRefused as exc:
        raise _submit_refused(parsed, exc) from None
    # Fields the server did not know are not used: a misspelt one loses its setting.
    for line in parsed.warnings_said(job.get("warnings") or []):
        warn(line)
    _made(api, job, f"Job {job['job_id']} submitted ({job.get('status')})", watch=watch)


def _made(api: Api, job: dict[str, Any], said: str, *, watch: bool) -> None:
    """A job was made: its id and dashboard link (with `--json` its status, one line when
    followed: the events' JSON lines come next), then, with `--watch`, follow it."""
    link = api.dashboard_url(job["job_id"])
    if state().json:
        body = {**job, "dashboard_url": link}
        if watch:
            sys.stdout.write(json.dumps(body, default=str) + "\n")
        else:
            emit_json(body)
    else:
        console.print(said, soft_wrap=True, highlight=False)
        console.print(f"Dashboard: {link}", soft_wrap=True, highlight=False)
    if watch:
        sys.stdout.flush()
        raise SystemExit(int(job_follow(api, job["job_id"], as_json=state().json)))


def _job(api: Api, job_id: str) -> dict[str, Any]:
    return api.call("GET", f"/eval/jobs/{job_id}", what=f"job {job_id}")


@click.command()
@click.argument("job_id")
@json_option
def status(job_id: str) -> None:
    """A job's status and progress."""
    api = state().api()
    job = _job(api, job_id)
    if state().json:
        emit_json({**job, "dashboard_url": api.dashboard_url(job_id)})
        return
    progress = job.get("results") or {}
    rows = [["status", job.get("status")], ["name", job.get("name") or "–"],
            ["model", ((job.get("config") or {}).get("policy") or {}).get("model") or "–"],
            ["samples", f"{progress.get('completed', 0)}/{progress.get('total', '?')} done"],
            ["failed", progress.get("failed", 0)], ["running", progress.get("running", 0)],
            ["mean so far", number(progress.get("mean_reward"))],
            ["created", job.get("created_at")], ["completed", job.get("completed_at") or "–"],
            ["dashboard", api.dashboard_url(job_id)]]  # fmt: skip
    if job.get("error"):
        rows.insert(1, ["error", job["error"]])
    console.print(table(f"job {job_id}", ["", ""], [[k, str(v)] for k, v in rows]))


@click.command()
@click.argument("job_id")
@json_option
def watch(job_id: str) -> None:
    """Follow a job to its end with a progress bar, then show its summary."""
    api = state().api()
    _job(api, job_id)
    raise SystemExit(int(job_follow(api, job_id, as_json=state().json)))


@click.command()
@click.argument("job_id")
@click.option("--reason", help="Said in the job's cancelled event.")
@json_option
def cancel(job_id: str, reason: str | None) -> None:
    """Cancel a job: samples not started are not run."""
    body = {"reason": reason} if reason else {}
    job = state().api().call("POST", f"/eval/jobs/{job_id}/cancel", json=body, what=f"job {job_id}")
    if state().json:
        emit_json(job)
    else:
        console.print(job.get("message") or job_line(job))


def _seed_list(seeds: str, expected: str) -> list[int]:
    """`--seeds` as a list of seeds ("1,2,5"); anything else names what was expected."""
    try:
        return [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter(expected, param_hint="--seeds") from None


def _refused(command: str, exc: RequestRefused) -> CliError:
    field, message = first_field_error(exc.fields)
    return CliError(f"{command} refused: {'.'.join(field) or 'body'}: {message}", Exit.INVALID)


@click.command()
@click.argument("job_id")
@click.option("--seeds", default="failed", show_default=True,
              help="failed (reuse the successes), all, or a comma-separated list of seeds.")  # fmt: skip
@click.option("--watch", is_flag=True, help="Follow the new job to its end.")
@json_option
def rerun(job_id: str, seeds: str, watch: bool) -> None:
    """Run a finished job again as a new job: its failed seeds, all, or some."""
    chosen: Any = seeds
    if seeds not in ("failed", "all"):
        chosen = _seed_list(seeds, "failed, all, or seeds such as 1,2,5")
    api = state().api()
    try:
        job = api.call(
            "POST", f"/eval/jobs/{job_id}/rerun", json={"seeds": chosen}, what=f"job {job_id}"
        )
    except RequestRefused as exc:
        raise _refused("rerun", exc) from None
    _made(api, job, f"Job {job['job_id']} reruns {job_id} ({job.get('status')})", watch=watch)


@click.command()
@click.argument("job_id")
@click.option("--on-miss", type=click.Choice(["fail", "call"]),
              help="A call that misses the recording: fail its sample (the server's default), "
              "or call the provider.")  # fmt: skip
@click.option("--seeds", help="Some of the job's seeds, comma-separated (default: all).")
@click.option("--task-app-url", help="Run this task app instead of the job's.")
@click.option("--watch", is_flag=True, help="Follow the replay to its end.")
@click.option("--idempotency-key", help="Replaying again with this key returns the same job.")
@json_option
def replay(job_id: str, on_miss: str | None, seeds: str | None, task_app_url: str | None,
           watch: bool, idempotency_key: str | None) -> None:  # fmt: skip
    """Run an ended job again as a new job, its LLM calls answered from its recording."""
    body: dict[str, Any] = {"on_miss": on_miss, "task_app_url": task_app_url}
    if seeds is not None:
        body["seeds"] = _seed_list(seeds, "seeds such as 1,2,5")
    body = {name: value for name, value in body.items() if value is not None}
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    api = state().api()
    try:
        job = api.call("POST", f"/eval/jobs/{job_id}/replay", json=body, headers=headers,
                       what=f"job {job_id}")  # fmt: skip
    except RequestRefused as exc:
        raise _refused("replay", exc) from None
    _made(api, job, f"Job {job['job_id']} replays {job_id} ({job.get('status')})", watch=watch)


@click.command(name="jobs")
@click.option("--status", "status_", help="pending, running, completed, failed or cancelled.")
@click.option("--tag", help="Only jobs with this tag.")
@click.option("-q", "query", help="Search names, app id, model and env name.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 200))
@json_option
def jobs_list(status_: str | None, tag: str | None, query: str | None, limit: int) -> None:
    """Your jobs, newest first."""
    params = {
        k: v for k, v in {"status": status_, "tag": tag, "q": query, "limit": limit}.items() if v
    }
    try:
        page = state().api().call("GET", "/eval/jobs", params=params)
    except RequestRefused as exc:
        field, message = first_field_error(exc.fields)
        raise CliError(f"--{field[0] if field else 'status'}: {message}", Exit.INVALID) from None
    if state().json:
        emit_json(page)
        return
    rows = []
    for job in page["jobs"]:
        progress = job.get("results") or {}
        rows.append([job["job_id"], job.get("name") or "", job.get("status"),
                     f"{progress.get('completed', 0)}/{progress.get('total', '?')}",
                     number(progress.get("mean_reward")), ",".join(job.get("tags") or []),
                     str(job.get("created_at", ""))[:19]])  # fmt: skip
    console.print(
        table(None, ["job", "name", "status", "samples", "mean", "tags", "created"], rows)
    )
