"""People's labels of samples: saving one (its author's, edited in place), the labels a sample
carries (its own, and those made on the original a rerun reused or a re-judgement judges
again), a job's labels, and
the rows its agreement figures are made of (`jobs.agreement`).

A label belongs to the seed run it was made on and is never moved or copied: a retry keeps
the seed run, a rerun's reused sample (`SeedRun.reused_from`) and a re-judgement's sample
(`SeedRun.judged_rollout`) point at it and show it as "labelled on the original", retention prunes trace content only. Only deleting the job (or the
author's account) removes labels.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Max, Q, QuerySet
from django.db.models.functions import Coalesce

from jobs import stats
from jobs.agreement import Rated, agreement_figures, people_score, people_verdict
from jobs.models import (
    EvalJob,
    JudgeStatus,
    RewardSource,
    RolloutAttempt,
    SampleLabel,
    SeedRun,
    SeedStatus,
    Verdict,
)

# How many tags a label may have (each as a job's tag), and how long its notes.
MAX_LABEL_TAGS = 20
MAX_NOTES_CHARS = 10_000
# How far back a rerun (or re-judgement) of a rerun of ... is followed to the sample its labels
# were made on.
MAX_REUSE_HOPS = 4


@dataclass(frozen=True)
class LabelChange:
    """A label as its author gives it (validated by the caller: jobs/api/labels.py)."""

    verdict: Verdict
    score: float | None = None
    notes: str = ""
    tags: tuple[str, ...] = ()


def label_save(
    *, seed_run: SeedRun, author: AbstractBaseUser, change: LabelChange
) -> tuple[SampleLabel, bool]:
    """The author's label of the sample, made or edited: (label, made now)."""
    label, created = SampleLabel.objects.update_or_create(
        seed_run=seed_run,
        author=author,
        defaults={
            "verdict": change.verdict,
            "score": change.score,
            "notes": change.notes,
            "tags": list(change.tags),
        },
    )
    return label, created


def _parent() -> Coalesce:
    """The sample a seed run carries labels from besides its own: the one a rerun reused, or
    the rollout a re-judgement judges again (jobs/verifier/rejudge.py)."""
    return Coalesce("reused_from_id", "judged_rollout__seed_run_id")


def _parents(ids: Iterable[int]) -> dict[int, int | None]:
    return dict(
        SeedRun.objects.filter(id__in=list(ids)).annotate(p=_parent()).values_list("id", "p")
    )


def _origins(run_ids: Iterable[int]) -> dict[int, list[int]]:
    """For each seed run id, the ids it carries labels of: itself, then the samples it was
    reused or judged from, nearest first (at most MAX_REUSE_HOPS back)."""
    chains = {run_id: [run_id] for run_id in run_ids}
    parent_of = _parents(chains)
    for _ in range(MAX_REUSE_HOPS):
        wanted = {p for p in parent_of.values() if p is not None}
        if not wanted:
            break
        for run_id, parent in parent_of.items():
            if parent is not None:
                chains[run_id].append(parent)
        known = _parents(wanted)
        parent_of = {r: known.get(p) if p is not None else None for r, p in parent_of.items()}
    return chains


def label_body(label: SampleLabel, *, run: SeedRun, origin: SeedRun | None = None) -> dict:
    """A label as the API, the exports and the pages show it, on the sample `run`; `origin`:
    the sample it was made on, when that is an earlier job's (a rerun reused it)."""
    made_on = origin or run
    return {
        "id": label.id,
        "job_id": run.job_id,
        "seed": run.seed,
        "repeat": run.repeat,
        "verdict": label.verdict,
        "score": label.score,
        "notes": label.notes,
        "tags": label.tags,
        "author": label.author.get_username(),
        "created_at": label.created_at,
        "updated_at": label.updated_at,
        "on_original": origin is not None,
        "labelled_on": made_on.job_id,
    }


def labels_of(runs: Iterable[SeedRun]) -> dict[int, list[dict]]:
    """The labels each sample carries (its own first, then its originals'), by seed run id."""
    runs = {run.id: run for run in runs}
    chains = _origins(runs)
    every = {i for chain in chains.values() for i in chain}
    made = defaultdict(list)
    for label in (
        SampleLabel.objects.filter(seed_run_id__in=every)
        .select_related("author", "seed_run")
        .order_by("created_at", "id")
    ):
        made[label.seed_run_id].append(label)
    return {
        run_id: [
            label_body(label, run=runs[run_id], origin=None if i == run_id else label.seed_run)
            for i in chain
            for label in made[i]
        ]
        for run_id, chain in chains.items()
    }


def job_labels(*, job: EvalJob) -> list[dict]:
    """Every label the job's samples carry, by seed and repeat."""
    runs = list(labelled_runs(job=job).order_by("seed", "repeat"))
    carried = labels_of(runs)
    return [body for run in runs for body in carried[run.id]]


def job_labels_by_sample(*, job: EvalJob) -> dict[tuple[int, int], list[dict]]:
    """The labels the job's labelled samples carry, by (seed, repeat)."""
    by_sample: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for body in job_labels(job=job):
        by_sample[body["seed"], body["repeat"]].append(body)
    return dict(by_sample)


def job_seed_verdicts(*, job: EvalJob) -> dict[int, str]:
    """People's verdict of each labelled seed of the job, over the labels of all its samples
    (`jobs.agreement.people_verdict`): what a comparison of two jobs shows per seed."""
    by_seed: dict[int, list[str]] = defaultdict(list)
    for (seed, _), bodies in job_labels_by_sample(job=job).items():
        by_seed[seed].extend(b["verdict"] for b in bodies)
    return {seed: people_verdict(verdicts) for seed, verdicts in by_seed.items()}


def job_labels_stamp(*, job: EvalJob) -> str:
    """What changes whenever a label the job's samples carry is made or edited: how many there
    are and the latest change (what a kept traces zip was made of, traces.zip.export)."""
    carried = SampleLabel.objects.filter(_carried_by(job=job)).aggregate(
        Count("id"), Max("updated_at")
    )
    latest = carried["updated_at__max"]
    return f"{carried['id__count']}:{latest.timestamp() if latest else 0}"


def _carried_by(*, job: EvalJob) -> Q:
    """Labels made on the job's samples or on the originals they were reused or judged from."""
    carried = Q(seed_run__job=job)
    level = SeedRun.objects.filter(job=job)
    for _ in range(MAX_REUSE_HOPS):
        parents = level.annotate(p=_parent()).values("p")
        carried |= Q(seed_run_id__in=parents)
        level = SeedRun.objects.filter(id__in=parents)
    return carried


def labelled_runs(*, job: EvalJob) -> QuerySet[SeedRun]:
    """The job's samples that carry a label (their own or an original's): the labelled samples
    and, MAX_REUSE_HOPS deep, the samples made from them (few: labels are made by hand)."""
    level = set(SampleLabel.objects.filter(_carried_by(job=job)).values_list("seed_run", flat=True))
    carriers = set(level)
    for _ in range(MAX_REUSE_HOPS):
        if not level:
            break
        judged = RolloutAttempt.objects.filter(seed_run_id__in=list(level))
        made_from = Q(reused_from_id__in=list(level)) | Q(judged_rollout__in=judged)
        level = set(SeedRun.objects.filter(made_from).values_list("id", flat=True)) - carriers
        carriers |= level
    return SeedRun.objects.filter(job=job, id__in=list(carriers))


def job_label_count(*, job: EvalJob) -> int:
    """Labels made on the job's own samples: what goes when the job is deleted."""
    return SampleLabel.objects.filter(seed_run__job=job).count()


# The score figures of `jobs.stats.job_figures` that people's labels change.
SCORE_FIGURES = ("mean_score", "mean_score_samples", "mean_score_scored", "num_scored",
                 "num_passed", "pass_rate", "pass_at_k", "pass_hat_k", "mean_score_ci95")  # fmt: skip


def job_people(*, job: EvalJob) -> dict[str, Any]:
    """What people made of the job's samples, as its summary says it: `num_labelled` (samples
    carrying a label), `agreement` (`jobs.agreement`) and `reward_source`; with
    `human_else_task_app`, `people_figures`: the score figures (SCORE_FIGURES) with each sample
    people scored (`jobs.agreement.people_score`) counted at their score, and how many
    (`num_scored_by_people`)."""
    rated = [r for _, r in job_rated(job=job)]
    people: dict[str, Any] = {
        "num_labelled": labelled_runs(job=job).count(),
        "agreement": agreement_figures(rated, threshold=job.pass_threshold),
        "reward_source": job.reward_source or "job",
    }
    if job.reward_source == RewardSource.HUMAN_ELSE_TASK_APP:
        samples, by_people = [], 0
        for one in rated:
            score = people_score(one)
            by_people += score is not None
            samples.append(one.sample if score is None else replace(
                one.sample, status=SeedStatus.SUCCEEDED, score=score
            ))  # fmt: skip
        figures = stats.job_figures(samples, repeats=job.repeats, threshold=job.pass_threshold)
        people["people_figures"] = {name: figures[name] for name in SCORE_FIGURES}
        people["num_scored_by_people"] = by_people
    return people


def job_reward_source_set(*, job: EvalJob, source: RewardSource) -> EvalJob:
    """Take the job's score figures from people's labels where present, or not."""
    job.reward_source = source
    job.save(update_fields=["reward_source"])
    return job


def job_rated(*, job: EvalJob) -> Iterator[tuple[int, Rated]]:
    """(seed run id, what each rater made of it) of the job's finished samples, by seed and
    repeat. The task app's score is `task_app_score` (the row's `score` for a sample judged by
    no verifier before it was kept apart)."""
    runs = (
        SeedRun.objects.filter(job=job, status__in=[SeedStatus.SUCCEEDED, SeedStatus.FAILED])
        .order_by("seed", "repeat")
        .values_list("id", "seed", "repeat", "status", "score", "task_app_score", "judge_status",
                     "verifier_score")
    )  # fmt: skip
    carried = _carried_verdicts(job=job)
    for run_id, seed, repeat, status, score, task_app, judged, verifier in runs.iterator():
        own = task_app if task_app is not None or judged else score
        verdicts, scores = carried.get(run_id, ((), ()))
        yield (
            run_id,
            Rated(
                sample=stats.Sample(seed, repeat, status, own),
                judge_score=verifier if judged == JudgeStatus.DONE else None,
                verdicts=verdicts,
                people_scores=scores,
            ),
        )


def _carried_verdicts(*, job: EvalJob) -> dict[int, tuple[tuple[str, ...], tuple[float, ...]]]:
    """(verdicts, corrected scores) of the labels each labelled sample of the job carries."""
    carried = labels_of(labelled_runs(job=job))
    return {
        run_id: (
            tuple(b["verdict"] for b in bodies),
            tuple(
                b["score"] for b in bodies if b["score"] is not None and math.isfinite(b["score"])
            ),
        )
        for run_id, bodies in carried.items()
    }
