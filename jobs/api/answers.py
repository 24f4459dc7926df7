"""What each operation of the API answers, as /api/docs shows it: the shapes built by
`jobs.public` (a job, its events), `traces.results` (results, the summary, comparisons) and the
views, typed field by field. Only the OpenAPI schema reads these serializers; no answer is
rendered through them (tests/api/test_documented_answers.py checks real answers against them).
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers as s

from jobs import kinds
from jobs.api import judge_answers, review_answers
from jobs.events import EventType
from jobs.models import JobStatus, SeedStatus

# --- small pieces ---------------------------------------------------------------------------


def _number(help_text: str = "", **kwargs) -> s.FloatField:
    """A number that is null when unknown (no sample scored yet, a model of unknown price)."""
    return s.FloatField(allow_null=True, help_text=help_text, **kwargs)


def _text(help_text: str = "") -> s.CharField:
    return s.CharField(allow_null=True, help_text=help_text)


class ObjectField(s.DictField):
    """A JSON object of the caller's (or a task app's) own keys, with an example for the docs
    (jobs.api.schema.ObjectSchema): ReDoc would otherwise show `{"property1": null, ...}`."""

    def __init__(self, *, example: dict, **kwargs):
        self.example = example
        super().__init__(**kwargs)


def _object(help_text: str, example: dict, *, allow_null: bool = False) -> ObjectField:
    return ObjectField(example=example, allow_null=allow_null, help_text=help_text)


@extend_schema_field(
    {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2,
     "nullable": True, "description": "a 95% bootstrap interval [low, high]; null below 2 samples"}
)  # fmt: skip
class IntervalField(s.ListField):
    pass


@extend_schema_field(
    {"type": "object", "additionalProperties": {"type": "number", "nullable": True},
     "description": "k (as text) to the figure for k samples of each seed",
     "example": {"1": 0.5, "4": 0.82}}
)  # fmt: skip
class PerKField(s.DictField):
    pass


class Error(s.Serializer):
    error = s.CharField(help_text="a code: invalid_request, not_found, not_authenticated, ...")
    detail = s.CharField(help_text="readable text; for a 400 it names each offending field")
    fields = ObjectField(
        required=False,
        help_text="a 400's offending fields, each with its messages",
        example={"seeds": ["must not be empty"]},
    )


ERROR = Error
ERRORS = {
    400: OpenApiResponse(Error, description="bad input: `fields` names each offending field"),
    401: OpenApiResponse(Error, description="no API key, or a wrong or revoked one"),
    404: OpenApiResponse(Error, description="no such job, or another account's"),
}


# --- a job ----------------------------------------------------------------------------------


class JobConfig(s.Serializer):
    """The job's configuration as sent (defaults filled in); secrets shown as set or not."""

    task_app_url = s.CharField(help_text="credentials in it are shown as <redacted>")
    task_app_kind = s.ChoiceField(choices=kinds.KINDS)
    task_app_api_key = s.ChoiceField(
        choices=["set"], allow_null=True, help_text='"set" or null: the key is never shown'
    )
    has_task_app_api_key = s.BooleanField()
    app_id = _text()
    env_name = _text()
    seeds_count = s.IntegerField()
    policy = _object(
        "as sent: model, provider, temperature, ...", {"model": "gpt-4o-mini", "provider": "openai"}
    )
    env_config = _object("as sent; passed to the task app", {"split": "test"})
    verifier_config = _object(
        "as sent, or null", {"enabled": True, "reward_source": "verifier"}, allow_null=True
    )
    mode = s.ChoiceField(choices=["eval", "rl"])
    max_concurrent = s.IntegerField()
    timeout = s.FloatField(help_text="seconds per rollout")
    max_cost_usd = _number("the job's budget, or null")
    max_tokens = s.IntegerField(allow_null=True)
    rollout_limits = _object("per-sample limits, or null", {"max_llm_calls": 20}, allow_null=True)
    judged_from = _text("the job this one re-judges (POST .../judge), or null")
    replay_of = _text("the job whose recorded LLM answers this one replays, or null")
    replay_on_miss = _text('what a call missing its recording gets, "fail" or "call"; or null')
    cache = _object(
        "identical calls answered from a cache, or null", {"scope": "account", "ttl_s": 86400.0},
        allow_null=True,
    )  # fmt: skip
    repeats = s.IntegerField()
    pass_threshold = s.FloatField()
    max_failures = _number("a count or a fraction of the samples, or null")


class JobProgress(s.Serializer):
    mean_reward = _number("mean score so far (a failed sample counts 0), null before any")
    completed = s.IntegerField(help_text="samples over: succeeded + failed")
    total = s.IntegerField(help_text="samples of the job: seeds x repeats")
    succeeded = s.IntegerField()
    failed = s.IntegerField()
    cancelled = s.IntegerField()
    running = s.IntegerField()
    pending = s.IntegerField()


class JobListItem(s.Serializer):
    job_id = s.CharField()
    name = s.CharField(allow_blank=True)
    tags = s.ListField(child=s.CharField())
    parent_job_id = _text("the job this one reruns, or null")
    status = s.ChoiceField(choices=JobStatus.choices)
    error = _text("why the job failed, or null")
    created_at = s.DateTimeField()
    started_at = s.DateTimeField(allow_null=True)
    completed_at = s.DateTimeField(allow_null=True)
    config = JobConfig()
    results = JobProgress()


class Job(JobListItem):
    metadata = _object("as sent", {"team": "evals"})


class FieldWarning(s.Serializer):
    field = s.CharField(help_text="a field of the body evalhub does not know (a.b when nested)")
    closest = _text("the known field it is closest to, or null")
    message = s.CharField()


class JobCreated(Job):
    warnings = FieldWarning(
        many=True, help_text="the body's fields evalhub did not use: a typo loses its setting"
    )


class JobCancelled(Job):
    message = s.CharField(help_text="what cancelling did")


class JobList(s.Serializer):
    jobs = JobListItem(many=True)
    next = s.URLField(allow_null=True, help_text="the next page's URL, or null")
    next_cursor = _text("the next page's `cursor`, or null")
    has_more = s.BooleanField()


# --- results --------------------------------------------------------------------------------


class Summary(review_answers.SummaryPeople, judge_answers.JudgeSummary):
    """The job's figures over its samples (docs/api.md defines each; people's labels and the
    agreement figures: docs/review.md)."""

    mean_score = _number("over every sample, a failed one counting 0")
    mean_score_samples = s.IntegerField()
    mean_score_scored = _number("over the samples that have a score")
    num_scored = s.IntegerField()
    num_samples = s.IntegerField()
    repeats = s.IntegerField()
    pass_threshold = s.FloatField()
    num_passed = s.IntegerField()
    pass_rate = _number()
    pass_at_k = PerKField()
    pass_hat_k = PerKField()
    mean_score_ci95 = IntervalField()
    mean_reward = _number("mean_score, by the name synth-ai reads")
    std_score = _number()
    min_score = _number()
    max_score = _number()
    total_tokens = s.IntegerField()
    total_cost_usd = _number("null when a model's price is unknown")
    seeds_with_unknown_cost = s.IntegerField()
    budget_exceeded = s.BooleanField()
    seeds_refused_by_budget = s.IntegerField()
    num_seeds = s.IntegerField()
    num_successful = s.IntegerField()
    num_failed = s.IntegerField()
    num_cancelled = s.IntegerField()
    num_pending = s.IntegerField()
    latency_p50_ms = _number()
    latency_p95_ms = _number()
    llm_calls_usage_unknown = s.IntegerField(help_text="calls whose usage was never learnt")
    replayed_calls = s.IntegerField(help_text="calls answered from a recording (docs/replay.md)")
    live_calls = s.IntegerField(help_text="calls a provider answered")
    divergences = s.IntegerField(help_text="a replay's calls that missed their recording")
    replayed_cost_usd = _number("what the replayed calls cost when recorded; not in total_cost_usd")


class SeedFigures(s.Serializer):
    seed = s.IntegerField()
    samples = s.IntegerField()
    mean = _number()
    std = _number()
    passes = s.IntegerField()


class ResultRow(judge_answers.JudgeRow):
    """One sample (a seed and a repeat)."""

    seed = s.IntegerField()
    repeat = s.IntegerField()
    status = s.ChoiceField(choices=SeedStatus.choices)
    score = _number("task app's outcome_reward, else outcome_score, else reward_mean")
    reward_mean = _number()
    outcome_score = _number()
    events_score = _number()
    verifier_score = _number()
    reward = _number("the reward after the verifier's formula (verifier_config)")
    outcome_objectives = _object(
        "as the task app sent it, or null", {"accuracy": 1.0}, allow_null=True
    )
    latency_ms = _number()
    tokens = s.IntegerField(allow_null=True, help_text="every LLM call of the sample")
    cost_usd = _number("null when a model's price is unknown")
    cost_unknown = s.BooleanField()
    num_llm_calls = s.IntegerField()
    budget_exceeded = s.BooleanField()
    rollout_limit = _text("the rollout limit that refused a call, or null")
    llm_calls_usage_unknown = s.IntegerField(help_text="calls whose usage was never learnt")
    replayed_calls = s.IntegerField(help_text="calls answered from a recording (docs/replay.md)")
    live_calls = s.IntegerField(help_text="calls a provider answered")
    divergences = s.IntegerField(help_text="calls that missed their recording")
    replayed_cost_usd = _number("what the replayed calls cost when recorded; not in cost_usd")
    attempts = s.IntegerField()
    error = _text()
    started_at = s.DateTimeField(allow_null=True)
    finished_at = s.DateTimeField(allow_null=True)
    reused = s.BooleanField(help_text="carried over from the parent job by a rerun")


class Results(Summary):
    """The whole results: the summary's fields repeated at the top level (synth-ai reads
    `summary.x or data.x`), then the per-seed figures and every sample's row."""

    job_id = s.CharField()
    task_app_kind = s.ChoiceField(choices=kinds.KINDS)
    status = s.ChoiceField(choices=JobStatus.choices)
    error = _text()
    summary = Summary()
    seeds = SeedFigures(many=True)
    results = ResultRow(many=True)


class ResultsPage(s.Serializer):
    """One page of rows (`limit`, `cursor`)."""

    job_id = s.CharField()
    status = s.ChoiceField(choices=JobStatus.choices)
    error = _text()
    results = ResultRow(many=True)
    next_cursor = _text("the next page's `cursor`, or null on the last")


RESULTS = PolymorphicProxySerializer(
    component_name="ResultsOrPage",
    serializers=[Results, ResultsPage],
    resource_type_field_name=None,
)


class SeedTrace(s.Serializer):
    job_id = s.CharField()
    seed = s.IntegerField()
    repeat = s.IntegerField()
    result = ResultRow()
    trace = _object(
        "the seed's trace document, as in the zip (docs/trace-format.md, docs/trace.schema.json)",
        {"schema": "evalhub.trace/1", "seed": 1, "status": "succeeded", "llm_calls": []},
    )


# --- events ---------------------------------------------------------------------------------


class Event(s.Serializer):
    seq = s.IntegerField(help_text="numbered from 1 in the job's order")
    job_id = s.CharField()
    type = s.ChoiceField(choices=EventType.choices)
    message = s.CharField(allow_blank=True)
    data = _object(
        "the event's figures: completed, total, seed_status, summary, ...",
        {"seed": 1, "seed_status": "succeeded", "score": 1.0, "completed": 1, "total": 3},
    )
    created_at = s.DateTimeField()


class EventPage(s.Serializer):
    job_id = s.CharField()
    events = Event(many=True)
    next_seq = s.IntegerField(help_text="`since_seq` of the next read")
    has_more = s.BooleanField()


class WorkflowState(s.Serializer):
    job_id = s.CharField()
    run_id = _text()
    status = s.ChoiceField(choices=JobStatus.choices)
    progress = s.CharField(help_text='"<completed>/<total> seeds completed"')
    error = _text()


class WorkflowStateAnswer(s.Serializer):
    job_id = s.CharField()
    query_name = s.CharField()
    workflow_state = WorkflowState()


# --- comparisons ----------------------------------------------------------------------------


class CompareSide(s.Serializer):
    job_id = s.CharField()
    name = s.CharField(allow_blank=True)
    status = s.ChoiceField(choices=JobStatus.choices)
    model = _text()
    mean_score = _number()
    mean_score_ci95 = IntervalField()
    pass_rate = _number()
    pass_threshold = s.FloatField()
    num_samples = s.IntegerField()
    num_failed = s.IntegerField()
    total_cost_usd = _number()
    total_tokens = s.IntegerField(allow_null=True)
    latency_p50_ms = _number()
    latency_p95_ms = _number()
    repeats = s.IntegerField()


class CompareSeed(review_answers.CompareSeedPeople):
    seed = s.IntegerField()
    base_score = _number()
    candidate_score = _number()
    delta = _number()
    base_passed = s.BooleanField()
    candidate_passed = s.BooleanField()
    kind = s.ChoiceField(choices=["regression", "improvement", ""])


class Comparison(s.Serializer):
    base = CompareSide()
    candidate = CompareSide()
    num_seeds = s.IntegerField(help_text="seeds both jobs ran")
    wins = s.IntegerField()
    losses = s.IntegerField()
    ties = s.IntegerField()
    mean_difference = _number()
    mean_difference_ci95 = IntervalField()
    p_value = _number()
    test = s.CharField()
    regressions = s.ListField(child=s.IntegerField(), help_text="seeds the base passed only")
    improvements = s.ListField(child=s.IntegerField(), help_text="seeds the candidate passed only")
    only_in_base = s.ListField(child=s.IntegerField())
    only_in_candidate = s.ListField(child=s.IntegerField())
    seeds = CompareSeed(many=True)


# Answers that are not JSON: their media type and a word on them.
ZIP = OpenApiResponse(OpenApiTypes.BINARY, description="a zip: one trace document per sample")
CSV = OpenApiResponse(OpenApiTypes.STR, description="one CSV row per sample, with a header")


JSONL = OpenApiResponse(
    OpenApiTypes.STR, description='one {"messages": [...], "seed", "repeat", "score"} per line'
)
