"""Scores: one value from the task app's answer to the seed run's row and back."""

from __future__ import annotations

import pytest

from jobs import leases, scores
from jobs.models import SeedRun
from jobs.scores import Scores
from tests.jobs.conftest import claim


def test_the_score_fields_are_seed_run_fields_and_nothing_else():
    model_fields = {f.name for f in SeedRun._meta.get_fields()}
    assert set(scores.FIELDS) <= model_fields
    assert scores.FIELDS == (
        "score", "reward_mean", "outcome_score", "events_score", "verifier_score",
    )  # fmt: skip
    assert Scores().as_fields() == dict.fromkeys(scores.FIELDS)


@pytest.mark.django_db
def test_scores_written_by_a_finished_seed_read_back_the_same(job):
    written = Scores(
        score=0.5, reward_mean=0.25, outcome_score=None, events_score=0.75, verifier_score=1.0
    )
    (seed_run,) = claim(job, limit=1)
    assert leases.seed_run_finish(
        seed_run_id=seed_run.pk,
        worker="w1",
        status="succeeded",
        result=leases.SeedResult(scores=written),
    )
    assert Scores.of(SeedRun.objects.get(pk=seed_run.pk)) == written
