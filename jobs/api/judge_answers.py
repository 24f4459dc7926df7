"""The verifier's parts of the results, as /api/docs shows them (`jobs.api.answers` includes
them): a result row's verdict and judge spend, the summary's, and how the judge's calls were
answered in a replay or a re-judgement (docs/verifier.md, docs/replay.md). Only the OpenAPI
schema reads these serializers."""

from __future__ import annotations

from rest_framework import serializers as s


def _number(help_text: str = "") -> s.FloatField:
    return s.FloatField(allow_null=True, help_text=help_text)


def _text() -> s.CharField:
    return s.CharField(allow_null=True, help_text="")


class JudgeReplays(s.Serializer):
    """How the judge's calls were answered: as the policy's `replayed_calls`..."""

    judge_replayed_calls = s.IntegerField(help_text="judge calls answered from a recording")
    judge_live_calls = s.IntegerField(help_text="judge calls a provider answered")
    judge_divergences = s.IntegerField(help_text="judge calls that missed their recording")
    judge_replayed_cost_usd = _number("what the judge's replayed calls cost when recorded")


class JudgeSummary(JudgeReplays):
    mean_verifier_score = _number()
    num_judged = s.IntegerField()
    num_verifier_errors = s.IntegerField()
    judge_total_tokens = s.IntegerField()
    judge_total_cost_usd = _number("the judge's live calls (its replayed ones spent nothing)")


class JudgeRow(JudgeReplays):
    task_app_score = _number()
    judge_status = _text()
    verifier_justification = _text()
    verifier_error = _text()
    judge_tokens = s.IntegerField()
    judge_cost_usd = _number("the judge's live calls (its replayed ones spent nothing)")
    judge_num_llm_calls = s.IntegerField()
