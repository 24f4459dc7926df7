"""How often the task app, the judge and people agree on the same samples: pure Python, no
database (the rows come from `jobs.labels`).

Definitions (docs/review.md says them too):
- the three *raters* of a finished sample (succeeded or failed) are the task app (its score,
  a failed sample 0, as `jobs.stats.Sample.value` reads it), the judge (its score, when it
  judged the sample) and people (their labels: `pass` and `fail` count, `unsure` does not);
- a rater *says pass* when its score is >= the job's `pass_threshold`; people say pass when
  more of their verdicts on the sample are `pass` than `fail` (a tie says nothing), and their
  score is the mean of the corrected scores they gave (none given: no score);
- for each pair of raters, on the samples both said pass or fail: `agreement` is the share of
  samples on which they say the same, with its Wilson 95% interval; `kappa` is Cohen's kappa,
  (p_o - p_e) / (1 - p_e) with p_e the agreement expected by chance from each rater's own
  pass rate (None when p_e is 1: both said the same thing of every sample), with the
  large-sample 95% interval kappa +- 1.96 sqrt(p_o (1 - p_o) / (n (1 - p_e)^2)) clipped to
  [-1, 1]; on the samples both scored, `mean_abs_difference` of the scores with the 95%
  interval of `jobs.stats.bootstrap_mean_ci`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from jobs.stats import Sample, bootstrap_mean_ci

RATERS = ("task_app", "judge", "people")
PAIRS = (("task_app", "judge"), ("task_app", "people"), ("judge", "people"))
Z95 = 1.96


@dataclass(frozen=True)
class Rated:
    """What each rater made of one sample."""

    sample: Sample
    """The sample as the task app scored it (status and score)."""
    judge_score: float | None
    """The judge's score; None when it did not judge the sample."""
    verdicts: tuple[str, ...] = ()
    """People's verdicts on the sample (`pass`, `fail`, `unsure`), one per label."""
    people_scores: tuple[float, ...] = ()
    """The corrected scores people gave, one per label that has one."""


def people_verdict(verdicts: Sequence[str]) -> str | None:
    """What people said of a sample, one word: `pass` when more of their labels said pass than
    fail, `fail` when fewer, `unsure` on a tie or only `unsure`; None without a label."""
    if not verdicts:
        return None
    passes, fails = verdicts.count("pass"), verdicts.count("fail")
    return "unsure" if passes == fails else "pass" if passes > fails else "fail"


def people_pass(verdicts: Sequence[str]) -> bool | None:
    """The people's verdict as pass (True) or fail (False); None when they said neither."""
    verdict = people_verdict(verdicts)
    return None if verdict in (None, "unsure") else verdict == "pass"


def people_score(rated: Rated) -> float | None:
    """The score people gave a sample: the mean of their corrected scores, else 1 when they
    said pass and 0 when they said fail (`people_pass`); None when they said neither."""
    scores = [s for s in rated.people_scores if math.isfinite(s)]
    if scores:
        return math.fsum(scores) / len(scores)
    said = people_pass(rated.verdicts)
    return None if said is None else float(said)


def _said(rated: Rated, threshold: float) -> dict[str, tuple[bool | None, float | None]]:
    """(says pass, score) of each rater; (None, None) when it said nothing."""
    judge = rated.judge_score
    if judge is not None and not math.isfinite(judge):
        judge = None
    people = [s for s in rated.people_scores if math.isfinite(s)]
    return {
        "task_app": (rated.sample.passes(threshold), rated.sample.value),
        "judge": (None if judge is None else judge >= threshold, judge),
        "people": (
            people_pass(rated.verdicts),
            math.fsum(people) / len(people) if people else None,
        ),
    }


def wilson_interval(successes: int, n: int) -> tuple[float, float] | None:
    """The Wilson score 95% interval of a proportion (None without a trial)."""
    if n == 0:
        return None
    p = successes / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def cohen_kappa(pairs: Sequence[tuple[bool, bool]]) -> tuple[float, float] | None:
    """(kappa, its standard error) of two raters' pass / fail on the same samples; None when
    there is no sample or chance agreement is 1 (kappa is undefined)."""
    n = len(pairs)
    if n == 0:
        return None
    observed = sum(a == b for a, b in pairs) / n
    a_pass = sum(a for a, _ in pairs) / n
    b_pass = sum(b for _, b in pairs) / n
    chance = a_pass * b_pass + (1 - a_pass) * (1 - b_pass)
    if chance >= 1.0:
        return None
    kappa = (observed - chance) / (1 - chance)
    return kappa, math.sqrt(observed * (1 - observed) / (n * (1 - chance) ** 2))


def pair_figures(
    verdicts: Sequence[tuple[bool, bool]], differences: Sequence[float]
) -> dict[str, object]:
    """The figures of one pair of raters: `verdicts` the (a, b) pass / fail of the samples both
    said one of, `differences` |a - b| of the samples both scored."""
    n = len(verdicts)
    agreed = sum(a == b for a, b in verdicts)
    interval = wilson_interval(agreed, n)
    kappa = cohen_kappa(verdicts)
    mad = bootstrap_mean_ci(differences)
    return {
        "samples": n,
        "agreement": agreed / n if n else None,
        "agreement_ci95": list(interval) if interval else None,
        "kappa": kappa[0] if kappa else None,
        "kappa_ci95": (
            [max(-1.0, kappa[0] - Z95 * kappa[1]), min(1.0, kappa[0] + Z95 * kappa[1])]
            if kappa
            else None
        ),
        "score_samples": len(differences),
        "mean_abs_difference": math.fsum(differences) / len(differences) if differences else None,
        "mean_abs_difference_ci95": list(mad) if mad else None,
    }


def agreement_figures(rated: Iterable[Rated], *, threshold: float) -> dict[str, object]:
    """The agreement of every pair of raters over the finished samples (module docstring), and
    how many samples each rater said pass or fail of."""
    verdicts: dict[tuple[str, str], list[tuple[bool, bool]]] = {p: [] for p in PAIRS}
    differences: dict[tuple[str, str], list[float]] = {p: [] for p in PAIRS}
    counts = dict.fromkeys(RATERS, 0)
    for one in rated:
        if not one.sample.finished:
            continue
        said = _said(one, threshold)
        for rater in RATERS:
            counts[rater] += said[rater][0] is not None
        for a, b in PAIRS:
            (a_pass, a_score), (b_pass, b_score) = said[a], said[b]
            if a_pass is not None and b_pass is not None:
                verdicts[a, b].append((a_pass, b_pass))
            if a_score is not None and b_score is not None:
                differences[a, b].append(abs(a_score - b_score))
    return {
        "pass_threshold": threshold,
        "rated": counts,
        "pairs": {f"{a}_{b}": pair_figures(verdicts[a, b], differences[a, b]) for a, b in PAIRS},
    }
