"""The review queue of a job: its finished samples in the order a reviewer chose, those still
without a label the ones left to do. Orders (ORDERS):

- `failures`: the task app's lowest values first (a failed sample is 0), so failed rollouts
  and failing scores come before passing ones;
- `disagreements`: the largest difference between the task app's value and the judge's score
  first (a difference above the reviewer's `gap` is a disagreement); samples the judge did not
  score last;
- `random`: a shuffle fixed by `shuffle` (any integer): a fair sample of the job, the one to
  label for agreement figures that stand for the whole job;
- `confidence`: the judge's least confident verdicts first, its confidence being how far its
  score is from the job's pass threshold; samples the judge did not score last.
Ties go by seed and repeat.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from jobs.agreement import Rated
from jobs.labels import job_rated
from jobs.models import EvalJob

ORDERS = {
    "failures": "failures first",
    "disagreements": "disagreements first",
    "random": "random",
    "confidence": "lowest judge confidence first",
}
DEFAULT_ORDER = "failures"
DEFAULT_GAP = 0.5
Key = tuple[int, int]


def _gap(rated: Rated) -> float | None:
    if rated.judge_score is None:
        return None
    return abs(rated.sample.value - rated.judge_score)


@dataclass
class ReviewQueue:
    """The job's finished samples in review order, and which of them carry a label."""

    order: str
    samples: list[Key]
    labelled: set[Key]
    gaps: dict[Key, float | None] = field(default_factory=dict)

    @property
    def num_labelled(self) -> int:
        return len(self.labelled)

    @property
    def total(self) -> int:
        return len(self.samples)

    def first(self) -> Key | None:
        """The first sample still without a label."""
        return next((k for k in self.samples if k not in self.labelled), None)

    def after(self, key: Key) -> Key | None:
        """The next sample without a label after `key`, from the start again past the end."""
        at = self._index(key)
        rest = self.samples[at + 1 :] + self.samples[: at + 1]
        return next((k for k in rest if k not in self.labelled and k != key), None)

    def before(self, key: Key) -> Key | None:
        """The sample just before `key` (labelled or not: going back is for changing one's mind)."""
        at = self._index(key)
        return self.samples[at - 1] if at > 0 else None

    def position(self, key: Key) -> int:
        """1-based place of `key` in the order (0 when it is not in the queue)."""
        return self._index(key) + 1

    def _index(self, key: Key) -> int:
        try:
            return self.samples.index(key)
        except ValueError:
            return -1


def review_queue(*, job: EvalJob, order: str = DEFAULT_ORDER, shuffle: int = 0) -> ReviewQueue:
    """The job's queue in `order` (one of ORDERS)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}")
    rows = [((r.sample.seed, r.sample.repeat), r) for _, r in job_rated(job=job)]
    gaps = {key: _gap(r) for key, r in rows}
    threshold = job.pass_threshold
    if order == "failures":
        rows.sort(key=lambda kr: (kr[1].sample.value, kr[0]))
    elif order == "disagreements":
        rows.sort(key=lambda kr: (gaps[kr[0]] is None, -(gaps[kr[0]] or 0.0), kr[0]))
    elif order == "confidence":
        rows.sort(key=lambda kr: (kr[1].judge_score is None,
                                  abs((kr[1].judge_score or 0.0) - threshold), kr[0]))  # fmt: skip
    else:
        random.Random(shuffle).shuffle(rows)
    return ReviewQueue(
        order=order,
        samples=[key for key, _ in rows],
        labelled={key for key, r in rows if r.verdicts},
        gaps=gaps,
    )
