"""Replay jobs (docs/replay.md): which earlier job a new job replays, checked against its
owner's jobs, and the body of `POST .../replay`, made from the replayed job's own. What a replay
does with the recorded LLM calls is `traces.calls.replay`."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from evalhub import crypto
from jobs.models import EvalJob, SeedRun
from jobs.public import job_settings
from jobs.services import JobSpec

# What a call that does not match its recording gets: an error, and its sample fails with a
# divergence report ("fail"); or the provider's answer, recorded live ("call").
ON_MISS_FAIL, ON_MISS_CALL = "fail", "call"
ON_MISS = (ON_MISS_FAIL, ON_MISS_CALL)
# A re-judgement's judge call that matches nothing recorded: its new judge is asked, an
# ordinary live call, not a divergence (never a job's setting: not in ON_MISS).
ON_MISS_ASK = "ask"
# A job's cache of answers (`EvalJob.cache`): identical calls of this job, or of any job of
# the account, answered with an earlier answer no older than `ttl_s`.
CACHE_SCOPES = ("job", "account")
CACHE_TTL_DEFAULT_S = 86_400.0
CACHE_TTL_MAX_S = 30 * 86_400.0


class ReplayRefused(Exception):
    """The replay cannot be made as asked; `field` (dotted when nested) is what to fix."""

    def __init__(self, field: str, message: str, *, conflict: bool = False):
        super().__init__(message)
        self.field, self.message, self.conflict = field, message, conflict

    def fields(self) -> dict[str, Any]:
        """The error as a 400 names it: {"replay": {"job_id": [message]}}."""
        *outer, last = self.field.split(".")
        named: dict[str, Any] = {last: [self.message]}
        for name in reversed(outer):
            named = {name: named}
        return named


def replay_spec(*, owner: AbstractBaseUser, spec: JobSpec, replay: dict[str, Any]) -> JobSpec:
    """`spec` made a replay of the owner's job `replay["job_id"]`: that job must have ended and
    have run every seed asked for, with at least as many repeats."""
    job_id = replay["job_id"]
    job = None if "\x00" in job_id else EvalJob.objects.filter(owner=owner, pk=job_id).first()
    if job is None:  # another account's job reads as no job at all
        raise ReplayRefused("replay.job_id", "no job of yours has this id")
    if not job.is_terminal:
        raise ReplayRefused(
            "replay.job_id", f"job is {job.status}; replay it once it ends", conflict=True
        )
    ran = set(SeedRun.objects.filter(job=job).values_list("seed", flat=True).distinct())
    missing = sorted(set(spec.seeds) - ran)
    if missing:
        raise ReplayRefused("seeds", f"the replayed job did not run seeds {missing[:10]}")
    if spec.repeats > job.repeats:
        raise ReplayRefused("repeats", f"the replayed job ran {job.repeats} of each seed")
    return dataclasses.replace(
        spec, replay_of_id=job.id, replay_on_miss=replay.get("on_miss") or ON_MISS_FAIL
    )


def replay_body(job: EvalJob) -> dict[str, Any]:
    """The create body of a job like `job` (its seeds, task app, policy, settings), for a
    replay of it to override."""
    body: dict[str, Any] = {
        "task_app_url": job.task_app_url,
        "task_app_kind": job.task_app_kind,
        "app_id": job.app_id,
        "env_name": job.env_name,
        "seeds": sorted(set(SeedRun.objects.filter(job=job).values_list("seed", flat=True))),
        **job_settings(job),
        "name": f"{job.name or job.id} (replay)"[:200],
        "tags": list(job.tags or []),
        "metadata": dict(job.metadata or {}),
    }
    if job.has_task_app_api_key:
        try:
            body["task_app_api_key"] = crypto.decrypt(job.task_app_api_key_encrypted)
        except ValueError:  # encrypted under another SECRET_KEY
            raise ReplayRefused(
                "task_app_api_key", "the replayed job's key can no longer be read; send it"
            ) from None
    return body
