"""What the LLM calls were, raw and summed: each call's request and answer as the interceptor
recorded them (redacted: parameters, tools offered, the whole message list), for the seed page;
and the job's calls per model, with tokens by kind and cost, for the job page."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from frontend.selectors import AttemptView
from jobs.models import EvalJob
from traces.models import CallKind
from traces.redaction import Redactor
from traces.results import totals


def _pretty(value: Any, redactor: Redactor) -> str:
    return json.dumps(redactor.value(value), indent=2, ensure_ascii=False, default=str)


def raw_exchanges(*, attempts: list[AttemptView], redactor: Redactor) -> dict[int, dict[str, str]]:
    """Call id -> {"request": JSON text, "response": JSON text or ""}, every secret of the job
    replaced (the same redactor as the rest of the page)."""
    raw = {}
    for view in attempts:
        for step in view.steps:
            call = step.call
            raw[call.id] = {
                "request": _pretty(call.request, redactor),
                "response": "" if call.response is None else _pretty(call.response, redactor),
            }
    return raw


@dataclass(frozen=True)
class ModelRow:
    model: str
    usage: totals.Usage
    kind: str = CallKind.POLICY  # the policy's calls, or the verifier's judge's

    @property
    def uncached_prompt_tokens(self) -> int:
        return self.usage.prompt_tokens - self.usage.cached_tokens

    @property
    def answer_tokens(self) -> int:
        """Completion tokens that were not reasoning."""
        return self.usage.completion_tokens - self.usage.reasoning_tokens


def model_breakdown(*, job: EvalJob) -> list[ModelRow]:
    """The job's calls per model, the policy's first and the judge's after them (the cost card
    is the policy's, the verifier's card the judge's); in each, the most expensive (then the
    most used) first."""
    by_model = totals.job_usage_by_model(job=job)
    rows = [
        ModelRow(model=name, usage=usage, kind=kind) for (kind, name), usage in by_model.items()
    ]
    return sorted(
        rows,
        key=lambda r: (r.kind != CallKind.POLICY, -(r.usage.cost_usd or 0),
                       -r.usage.num_llm_calls, r.model),
    )  # fmt: skip


def model_totals(rows: list[ModelRow]) -> list[ModelRow]:
    """One total row per kind of call (model "total"), when the table has more than one row:
    the policy's total is the cost card's, the judge's the verifier's."""
    totals_of = []
    for kind in dict.fromkeys(r.kind for r in rows):
        of_kind = [r.usage for r in rows if r.kind == kind]
        if len(rows) > 1:
            totals_of.append(ModelRow(model="total", usage=totals.usage_sum(of_kind), kind=kind))
    return totals_of
