"""Figures computed from every row of a job, kept so that a read does not redo O(samples) work.

`cached(job=..., names=..., compute=...)` returns the figures called `names`, from the store when
they can be trusted, else from `compute()` (which returns a dict of named figures, stored
together: one pass over the rows fills several). When they can be trusted:

- a *settled* job (ended SETTLE_S ago, and no sample or judgement pending or running) no
  longer changes rows: its figures are computed once and read from then on (should an LLM
  call of it be saved even later, `forget_settled_of_attempts` drops them);
- a job still going, or ended with samples still open, changes all the time. A small one
  (at most LIVE_EXACT_MAX samples) is computed on every read, as before; a big one is read
  from the store for FRESH_S seconds after it was computed, so a page that re-renders while
  the job runs costs a pass over the rows at most that often. (The progress counts are
  always exact: they are counted by the database, `jobs.selectors.job_progress`.)

Nothing changes the rows of a settled job (a rerun or a re-judgement is a new job with figures
of its own); `forget` drops a job's figures should that ever be needed.

Stored as JSON text: figures go in and come out as JSON values (floats round-trip exactly,
tuples come back as lists, the order of keys is kept). A figure that is not a finite number is
missing: stored as null, and read as None if an older version stored it as NaN or Infinity.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from jobs.models import (
    OPEN_JUDGE_STATUSES,
    EvalJob,
    JobFigures,
    RolloutAttempt,
    SeedRun,
    SeedStatus,
)

LIVE_EXACT_MAX = 2000
FRESH_S = 10.0
# The LLM calls of a rollout are saved by the web process's writer a moment after they are
# answered, so possibly after the job ended: its rows are taken as final only this long after.
SETTLE_S = 60.0


def job_settled(*, job: EvalJob) -> bool:
    """Ended SETTLE_S ago or more, with no sample or judgement left pending or running: its
    rows are final."""
    if not job.is_terminal:
        return False
    if job.completed_at and timezone.now() - job.completed_at < timedelta(seconds=SETTLE_S):
        return False
    open_samples = SeedRun.objects.filter(job=job).filter(
        Q(status__in=[SeedStatus.PENDING, SeedStatus.RUNNING])
        | Q(judge_status__in=OPEN_JUDGE_STATUSES)
    )
    return not open_samples.exists()


def _big(job: EvalJob) -> bool:
    """More samples than are recomputed on every read while the job changes."""
    return job.num_samples > LIVE_EXACT_MAX


def _usable(*, job: EvalJob, kept: JobFigures) -> bool:
    if job.is_terminal and kept.settled:
        return True
    if not _big(job):
        return False
    return timezone.now() - kept.computed_at < timedelta(seconds=FRESH_S)


@dataclass(frozen=True)
class JsonText:
    """A figure as its JSON text, kept and handed on as it is: 100,000 seeds' figures are a few
    MiB of text but tens of MiB decoded."""

    text: str


def _text(value: Any) -> str:
    return value.text if isinstance(value, JsonText) else json.dumps(_finite(value))


def _finite(value: Any) -> Any:
    """The value with every float that is not finite made None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _loads(text: str) -> Any:
    """Kept figures from their text: a NaN or an infinity an older version stored is None."""
    return json.loads(text, parse_constant=lambda _: None)


def cached(
    *,
    job: EvalJob,
    names: tuple[str, ...],
    compute: Callable[[], dict[str, Any]],
    as_text: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The job's figures called `names`, by name (see the module's docstring); those named in
    `as_text` as `JsonText`, never decoded. `compute` may give any figure as `JsonText`."""
    kept = list(JobFigures.objects.filter(job=job, name__in=names))
    if len(kept) == len(names) and all(_usable(job=job, kept=k) for k in kept):
        return {k.name: JsonText(k.value) if k.name in as_text else _loads(k.value)
                for k in kept}  # fmt: skip
    # Settled is decided before computing: a sample ending meanwhile is in the rows read, and
    # figures stored as settled are never read from rows that could still change.
    settled = job_settled(job=job)
    values = compute()
    if settled or _big(job):
        store(job=job, values=values, settled=settled)
    found = {}
    for name in names:
        value = values[name]
        if name in as_text:
            found[name] = value if isinstance(value, JsonText) else JsonText(_text(value))
        else:
            found[name] = _loads(value.text) if isinstance(value, JsonText) else _finite(value)
    return found


def store(*, job: EvalJob, values: dict[str, Any], settled: bool) -> None:
    now = timezone.now()
    for name, value in values.items():
        JobFigures.objects.update_or_create(
            job=job,
            name=name,
            defaults={"value": _text(value), "settled": settled, "computed_at": now},
        )


def forget_settled_of_attempts(*, attempt_ids: list[int]) -> None:
    """LLM calls of these attempts were just saved: the final figures of their jobs, if any,
    were made without them (a call saved later than SETTLE_S after its job ended). One
    statement, written out: the interceptor's writer runs it with every save."""
    q = connection.ops.quote_name
    seed_run = q(RolloutAttempt._meta.get_field("seed_run").column)
    marks = ", ".join(["%s"] * len(attempt_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {q(JobFigures._meta.db_table)} WHERE settled = %s AND job_id IN "
            f"(SELECT s.job_id FROM {q(SeedRun._meta.db_table)} s "
            f"JOIN {q(RolloutAttempt._meta.db_table)} a ON a.{seed_run} = s.id "
            f"WHERE a.id IN ({marks}))",
            [True, *attempt_ids],
        )


def forget(*, job_id: str) -> None:
    """Drop the job's stored figures: the next read computes them from its rows."""
    JobFigures.objects.filter(job_id=job_id).delete()
