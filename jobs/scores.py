"""A rollout's scores: one typed value from the task app's answer to the seed run's row.

Every field is None when the task app did not report it (and all of them for a seed that
failed). The names are those of the `SeedRun` fields they are stored in. "The reward object" is
the answer's `reward_info` (synth-ai 0.5.0 and later) or its `metrics` (0.4.x).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from django.db.models import Case, F, FloatField, Q, Value, When

# The bounds a stored score must lie strictly between to be read as one (NaN lies within none).
_INF = float("inf")


def finite_or_none(value: Any) -> float | None:
    """A stored score as it is read: a number that is not finite (NaN, an infinity, which
    PostgreSQL keeps in a float column) is a missing score, never a figure."""
    if value is None or not math.isfinite(value):
        return None
    return value


def score_or_zero_sql(name: str = "score") -> Case:
    """The database's value of a sample for a mean, as `jobs.stats` counts it: its score, 0 when
    it has none or a stored one that is not finite (PostgreSQL orders NaN above infinity)."""
    finite = Q(**{f"{name}__gt": -_INF, f"{name}__lt": _INF})
    return Case(When(finite, then=F(name)), default=Value(0.0), output_field=FloatField())


@dataclass(frozen=True)
class Scores:
    score: float | None = None
    """The seed's score, the one figure a job's summary is computed from: the reward object's
    `outcome_reward`, else `outcome_objectives.reward`, else `outcome_score`, else
    `reward_mean`."""

    reward_mean: float | None = None
    """`reward_mean` of the reward object: its mean reward over the rollout."""

    outcome_score: float | None = None
    """`outcome_score` of the reward object: how the rollout's outcome scored."""

    events_score: float | None = None
    """`events_score` of the reward object: the score of the rollout's events."""

    verifier_score: float | None = None
    """A verifier's judgement: the reward object's `details.verifier_score`, else its
    `verifier_score`."""

    @classmethod
    def of(cls, seed_run: Any) -> Scores:
        """The scores stored on a seed run (or any object with the same fields); one stored
        that is not finite is missing (`finite_or_none`)."""
        return cls(**cls.fields_of(seed_run))

    @staticmethod
    def fields_of(seed_run: Any) -> dict[str, float | None]:
        """`of(seed_run).as_fields()` without the value between: the result rows read every
        sample's scores for each summary, results read and export."""
        return {name: finite_or_none(getattr(seed_run, name)) for name in FIELDS}

    def as_fields(self) -> dict[str, float | None]:
        """The seed run's model fields and their values, for an update or a create."""
        return {name: getattr(self, name) for name in FIELDS}


# The names of the score fields, in order: the same on `Scores` and on `SeedRun`.
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Scores))
