"""The public shape of a job and its events: built here once, and used by the API, the
dashboard, the server-sent events and the traces zip's manifest."""

from __future__ import annotations

from typing import Any

from evalhub.secretkeys import secret_keys_masked
from jobs import selectors
from jobs.events import EventType
from jobs.fields import url_shown
from jobs.models import EvalJob, JobEvent

# Fields a list of jobs never reads (the API's and the dashboard's): a job's own page has them.
LIST_DEFERRED = ("metadata",)


def job_config(job: EvalJob) -> dict[str, Any]:
    """The job's configuration as shown to people: its task app key as set/unset only, the
    credentials in its task app's URL and what is under a secret-named key of its settings
    (a policy's `api_key`, an environment's `password`) as `<redacted>`."""
    return {
        "task_app_url": url_shown(job.task_app_url),
        "task_app_kind": job.task_app_kind,
        "task_app_api_key": "set" if job.has_task_app_api_key else None,
        "has_task_app_api_key": job.has_task_app_api_key,
        "app_id": job.app_id,
        "env_name": job.env_name,
        "seeds_count": job.num_seeds,
        **secret_keys_masked(job_settings(job)),
        "judged_from": job.judged_from_id,  # a re-judgement of that job (jobs/verifier/)
        # A replay of that job's recorded LLM answers, and what a miss gets (docs/replay.md).
        "replay_of": job.replay_of_id,
        "replay_on_miss": job.replay_on_miss or None,
    }


def job_settings(job: EvalJob) -> dict[str, Any]:
    """How the job runs, as its create body says it (shown in its configuration, and the body
    a replay of it starts from, jobs.replays)."""
    return {
        "policy": job.policy,
        "env_config": job.env_config,
        "verifier_config": job.verifier_config,
        "mode": job.mode,
        "max_concurrent": job.max_concurrent,
        "timeout": job.timeout_s,
        "max_cost_usd": job.max_cost_usd,
        "max_tokens": job.max_tokens,
        "rollout_limits": job.rollout_limits,
        "repeats": job.repeats,
        "pass_threshold": job.pass_threshold,
        "max_failures": job.max_failures,
        "cache": job.cache,  # identical calls answered with an earlier answer: {scope, ttl_s}
    }


def job_status_body(job: EvalJob, progress: dict[str, int] | None = None) -> dict[str, Any]:
    """GET /api/eval/jobs/{id}: status, timestamps, configuration and progress."""
    return {**job_list_body(job, progress), "metadata": secret_keys_masked(job.metadata)}


def job_list_body(job: EvalJob, progress: dict[str, int] | None = None) -> dict[str, Any]:
    """A job in GET /api/eval/jobs: its status without `metadata` (up to
    EVALHUB_MAX_METADATA_BYTES each; the list does not even read it: `LIST_DEFERRED`)."""
    return {
        "job_id": job.id,
        "name": job.name,
        "tags": job.tags,
        "parent_job_id": job.parent_job_id,
        "status": job.status,
        # An ending job (jobs.ending) shows neither until its status says it is over.
        "error": job.error if not job.is_ending else None,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "completed_at": job.completed_at if job.is_terminal else None,
        "config": job_config(job),
        "results": progress if progress is not None else selectors.job_progress(job=job),
    }


def job_warnings(job: EvalJob) -> list[dict[str, Any]]:
    """The fields of the job's request evalhub did not know, each with the closest known one
    (`{"field", "closest", "message"}`; jobs.fields.unknown_fields), as its create answered."""
    warnings = selectors.job_created_data(job=job).get("warnings")
    return warnings if isinstance(warnings, list) else []


def event_body(event: JobEvent) -> dict[str, Any]:
    data = event_data(event)
    return {
        "seq": event.seq,
        "job_id": event.job_id,
        "type": event.type,
        "message": data.get("message", ""),
        "data": data,
        "created_at": event.created_at,
    }


def event_data(event: JobEvent) -> dict[str, Any]:
    """An event's `data` as clients read it. A seed's own status is `seed_status`: synth-ai's
    streamer (0.7.x) ends its stream on any event whose `data.status` is a terminal word such
    as "succeeded" or "failed". The job's events carry `completed` and `total` (and the
    completed event the `mean_reward` of its summary) for followers showing progress."""
    data = dict(event.data)
    if event.type == EventType.SEED_COMPLETED and "status" in data:
        data["seed_status"] = data.pop("status")
    elif event.type == EventType.JOB_CREATED and "num_seeds" in data:
        data.setdefault("completed", 0)
        data.setdefault("total", data.get("num_samples", data["num_seeds"]))
    elif event.type == EventType.JOB_COMPLETED and isinstance(data.get("summary"), dict):
        summary = data["summary"]
        data.setdefault("mean_reward", summary.get("mean_reward"))
        data.setdefault("total", summary.get("num_samples", summary.get("num_seeds")))
        data.setdefault(
            "completed", (summary.get("num_successful") or 0) + (summary.get("num_failed") or 0)
        )
    return data
