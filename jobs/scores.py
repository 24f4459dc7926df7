"""A rollout's scores: one typed value from the task app's answer to the seed run's row.

Every field is None when the task app did not report it (and all of them for a seed that
failed). The names are those of the `SeedRun` fields they are stored in.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Scores:
    score: float | None = None
    """The seed's score, the one figure a job's summary is computed from: the task app's
    `metrics.outcome_reward`, else `metrics.outcome_score`, else `metrics.reward_mean`."""

    reward_mean: float | None = None
    """`metrics.reward_mean` as the task app reported it: its mean reward over the rollout."""

    outcome_score: float | None = None
    """`metrics.outcome_score` as the task app reported it: how the rollout's outcome scored."""

    events_score: float | None = None
    """`metrics.events_score` as the task app reported it: the score of the rollout's events."""

    verifier_score: float | None = None
    """A verifier's judgement: `metrics.details.verifier_score`, else
    `metrics.verifier_score`."""

    @classmethod
    def of(cls, seed_run: Any) -> Scores:
        """The scores stored on a seed run (or any object with the same fields)."""
        return cls(**{name: getattr(seed_run, name) for name in FIELDS})

    def as_fields(self) -> dict[str, float | None]:
        """The seed run's model fields and their values, for an update or a create."""
        return {name: getattr(self, name) for name in FIELDS}


# The names of the score fields, in order: the same on `Scores` and on `SeedRun`.
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Scores))
