"""The compare pages' seeds: what each seed's difference is, the order they are read in, the
ties left out on request, and a seed's neighbours in that order (the side-by-side page's
previous / next).

Two words of a comparison are easy to mix up, so the pages name them by what they mean: a
*win* or a *loss* is a seed whose score went up or down at all ("higher" / "lower"); a
*regression* or an *improvement* is a seed that crossed the pass threshold ("pass → fail" /
"fail → pass"): `traces.results.comparison.seed_outcome`. Seeds are
read worst first: the regressions, the other losses, then the improvements, the other wins
(the largest first), then the ties."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import QueryDict

from traces.results.comparison import seed_outcome

# outcome -> (its place in the default order, the label shown)
OUTCOMES = {
    "regression": (0, "pass → fail"),
    "loss": (1, "lower"),
    "improvement": (2, "fail → pass"),
    "win": (3, "higher"),
    "tie": (4, "same"),
}
SORTS = {
    "": lambda s: (OUTCOMES[s["outcome"]][0], s["delta"] if s["delta"] < 0 else -s["delta"],
                   s["seed"]),
    "delta": lambda s: (s["delta"], s["seed"]),
    "-delta": lambda s: (-s["delta"], s["seed"]),
    "seed": lambda s: s["seed"],
}  # fmt: skip


@dataclass(frozen=True)
class CompareQuery:
    sort: str = ""
    hide_ties: bool = False

    @classmethod
    def from_query(cls, params: QueryDict) -> CompareQuery:
        sort = params.get("sort", "")
        return cls(sort=sort if sort in SORTS else "", hide_ties=params.get("ties") == "hide")

    def carried(self) -> str:
        """The order and the filter as a query string, for links between compared seeds."""
        kept = QueryDict(mutable=True)
        if self.sort:
            kept["sort"] = self.sort
        if self.hide_ties:
            kept["ties"] = "hide"
        return kept.urlencode()


def seed_rows(seeds: list[dict[str, Any]], query: CompareQuery) -> list[dict[str, Any]]:
    """The comparison's seeds with their outcome and label, in the order asked for, the ties
    left out when asked."""
    rows = []
    for s in seeds:
        outcome = seed_outcome(s)
        if query.hide_ties and outcome == "tie":
            continue
        rows.append({**s, "outcome": outcome, "label": OUTCOMES[outcome][1]})
    return sorted(rows, key=SORTS[query.sort])


@dataclass(frozen=True)
class Around:
    previous: int | None = None
    next: int | None = None
    position: int | None = None
    count: int = 0


def around(rows: list[dict[str, Any]], seed: int) -> Around:
    """The seeds before and after `seed` in the compare page's order."""
    seeds = [r["seed"] for r in rows]
    if seed not in seeds:
        return Around(next=seeds[0] if seeds else None, count=len(seeds))
    i = seeds.index(seed)
    return Around(
        previous=seeds[i - 1] if i else None,
        next=seeds[i + 1] if i + 1 < len(seeds) else None,
        position=i + 1,
        count=len(seeds),
    )
