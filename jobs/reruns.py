"""Rerunning a finished job: a new job with the parent's configuration (`parent_job`), on the
parent's seeds. With `seeds="failed"` the parent's succeeded samples are carried into the new
job as they were (`reused_from`, their attempts too; the caller copies what hangs off the
attempts, such as LLM calls) and only the others run: the new job's results are the whole,
resumed evaluation."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from django.db import transaction

from evalhub import crypto
from jobs import services
from jobs.models import EvalJob, RolloutAttempt, SeedRun, SeedStatus

BATCH = 500
# Sample fields carried over as they were.
_KEPT = ("status", "attempts", "failures", "losses", "score", "reward_mean", "outcome_score",
         "events_score", "verifier_score", "metrics", "task_trace", "latency_ms", "error",
         "started_at", "finished_at", "task_app_score", "judge_status", "verifier_justification",
         "verifier_error", "judged_at")  # fmt: skip
_ATTEMPT_KEPT = ("number", "status", "worker", "http_status", "error", "started_at",
                 "finished_at", "latency_ms")  # fmt: skip


class RerunRefused(Exception):
    """The rerun cannot be made as asked; `field` is what to fix."""

    def __init__(self, field: str, message: str, *, conflict: bool = False):
        super().__init__(message)
        self.field, self.message, self.conflict = field, message, conflict


def rerun_spec(parent: EvalJob, seeds: list[int], policy: dict[str, Any] | None):
    return services.JobSpec(
        task_app_url=parent.task_app_url,
        seeds=seeds,
        task_app_api_key=(
            crypto.decrypt(parent.task_app_api_key_encrypted)
            if parent.has_task_app_api_key
            else None
        ),
        app_id=parent.app_id,
        env_name=parent.env_name,
        policy=parent.policy if policy is None else policy,
        env_config=parent.env_config,
        verifier_config=parent.verifier_config,
        mode=parent.mode,
        max_concurrent=parent.max_concurrent,
        timeout=parent.timeout_s,
        max_cost_usd=parent.max_cost_usd,
        max_tokens=parent.max_tokens,
        rollout_limits=parent.rollout_limits,
        task_app_kind=parent.task_app_kind,
        repeats=parent.repeats,
        pass_threshold=parent.pass_threshold,
        max_failures=parent.max_failures,
        name=f"{parent.name or parent.id} (rerun)"[:200],
        tags=list(parent.tags or []),
        metadata=dict(parent.metadata or {}),
        parent_job_id=parent.id,
    )


def job_rerun(
    *,
    parent: EvalJob,
    seeds: str | list[int],
    policy: dict[str, Any] | None = None,
    copy_attempt_children: Callable[[dict[int, int]], Any] = lambda ids: None,
) -> EvalJob:
    """The new job. `seeds`: "failed" (reuse the succeeded samples, run the rest), "all", or a
    list of the parent's seeds. `copy_attempt_children` gets {parent attempt id: new attempt
    id} of the reused samples, inside the transaction that makes the job."""
    if not parent.is_terminal:
        raise RerunRefused("job", f"job is {parent.status}; rerun it once it ends", conflict=True)
    if seeds == "failed" and policy is not None:
        raise RerunRefused(
            "policy", "cannot be changed with seeds=failed: the reused samples ran the parent's"
        )
    ran = list(SeedRun.objects.filter(job=parent).values_list("seed", flat=True).distinct())
    chosen = sorted(set(ran)) if isinstance(seeds, str) else sorted(set(seeds))
    unknown = sorted(set(chosen) - set(ran))
    if unknown:
        raise RerunRefused("seeds", f"the job did not run seeds {unknown[:10]}")
    try:
        spec = rerun_spec(parent, chosen, policy)
    except ValueError:  # the key was encrypted under another SECRET_KEY
        raise RerunRefused(
            "job", "its task_app_api_key can no longer be read; create a new job instead"
        ) from None
    with transaction.atomic():
        job = services.job_create(owner=parent.owner, spec=spec)
        if seeds == "failed":
            copy_attempt_children(_samples_reuse(parent=parent, job=job))
    return job


def _samples_reuse(*, parent: EvalJob, job: EvalJob) -> dict[int, int]:
    """Put the parent's succeeded samples in place of the new job's pending ones; returns
    {parent attempt id: copied attempt id}."""
    done = list(SeedRun.objects.filter(job=parent, status=SeedStatus.SUCCEEDED))
    if not done:
        return {}
    placeholders = dict(
        ((seed, repeat), pk)
        for seed, repeat, pk in SeedRun.objects.filter(job=job).values_list("seed", "repeat", "id")
    )
    doomed = [placeholders[(r.seed, r.repeat)] for r in done]
    for start in range(0, len(doomed), BATCH):
        SeedRun.objects.filter(pk__in=doomed[start : start + BATCH]).delete()
    copies = SeedRun.objects.bulk_create(
        [
            SeedRun(
                job=job,
                seed=r.seed,
                repeat=r.repeat,
                reused_from=r,
                **{name: getattr(r, name) for name in _KEPT},
            )
            for r in done
        ],  # fmt: skip
        batch_size=BATCH,
    )
    copy_of = {r.pk: c.pk for r, c in zip(done, copies, strict=True)}
    attempts = list(RolloutAttempt.objects.filter(seed_run__in=done).order_by("id"))
    new_attempts = RolloutAttempt.objects.bulk_create(
        [replace_attempt(a, seed_run_id=copy_of[a.seed_run_id]) for a in attempts],
        batch_size=BATCH,
    )
    return {a.pk: n.pk for a, n in zip(attempts, new_attempts, strict=True)}


def replace_attempt(attempt: RolloutAttempt, *, seed_run_id: int) -> RolloutAttempt:
    """A copy of the attempt for a reused sample: its own run id and a token hash nobody holds
    the token of (the copy can never be called through the interceptor)."""
    return RolloutAttempt(
        seed_run_id=seed_run_id,
        run_id=f"reused-{secrets.token_hex(12)}",
        token_hash=secrets.token_hex(32),
        **{name: getattr(attempt, name) for name in _ATTEMPT_KEPT},
    )
