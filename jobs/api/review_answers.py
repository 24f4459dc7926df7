"""What the human-review operations answer, as /api/docs shows it (jobs/api/labels.py), and
the parts of the results summary and of a comparison that come from people's labels
(`jobs.api.answers` includes them). Only the OpenAPI schema reads these serializers."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers as s

from jobs.models import Verdict

# What `reward_source` says in the API (`jobs.models.RewardSource`, "" shown as "job").
REWARD_SOURCE_NAMES = ["job", "human_else_task_app"]


def _interval() -> s.ListField:
    return s.ListField(child=s.FloatField(), allow_null=True, help_text="95% interval [low, high]")


@extend_schema_field(
    {"type": "object", "additionalProperties": True,
     "example": {"mean_score": 0.6, "num_scored": 10, "num_passed": 6, "pass_rate": 0.6}}
)  # fmt: skip
class PeopleFigures(s.DictField):
    """The score figures of `jobs.labels.SCORE_FIGURES`, as people's labels make them."""


class Label(s.Serializer):
    id = s.IntegerField()
    job_id = s.CharField(help_text="the job whose sample carries the label")
    seed = s.IntegerField()
    repeat = s.IntegerField()
    verdict = s.ChoiceField(choices=Verdict.choices)
    score = s.FloatField(allow_null=True, help_text="the corrected score in [0, 1], or null")
    notes = s.CharField(allow_blank=True)
    tags = s.ListField(child=s.CharField())
    author = s.CharField()
    created_at = s.DateTimeField()
    updated_at = s.DateTimeField()
    on_original = s.BooleanField(
        help_text="made on the sample a rerun reused or a re-judgement judges again"
    )
    labelled_on = s.CharField(help_text="the job of the sample the label was made on")


class SampleLabels(s.Serializer):
    job_id = s.CharField()
    seed = s.IntegerField()
    repeat = s.IntegerField()
    labels = Label(many=True, help_text="the sample's own labels first, then its original's")


class AgreementPair(s.Serializer):
    samples = s.IntegerField(help_text="samples both raters said pass or fail of")
    agreement = s.FloatField(allow_null=True, help_text="share of those they agree on")
    agreement_ci95 = _interval()
    kappa = s.FloatField(allow_null=True, help_text="Cohen's kappa; null when undefined")
    kappa_ci95 = _interval()
    score_samples = s.IntegerField(help_text="samples both raters scored")
    mean_abs_difference = s.FloatField(allow_null=True)
    mean_abs_difference_ci95 = _interval()


class AgreementPairs(s.Serializer):
    task_app_judge = AgreementPair()
    task_app_people = AgreementPair()
    judge_people = AgreementPair()


class RatedCounts(s.Serializer):
    task_app = s.IntegerField()
    judge = s.IntegerField()
    people = s.IntegerField()


class Agreement(s.Serializer):
    """How often the task app, the judge and people agree (docs/review.md)."""

    pass_threshold = s.FloatField()
    rated = RatedCounts(help_text="samples each rater said pass or fail of")
    pairs = AgreementPairs()


class JobLabels(s.Serializer):
    job_id = s.CharField()
    num_samples = s.IntegerField()
    num_labelled = s.IntegerField(help_text="samples carrying a label")
    labels = Label(many=True)
    agreement = Agreement()
    reward_source = s.ChoiceField(choices=REWARD_SOURCE_NAMES)
    num_scored_by_people = s.IntegerField(required=False)
    people_figures = PeopleFigures(
        required=False, help_text="with human_else_task_app: the score figures people's labels make"
    )


class RewardSourceSet(s.Serializer):
    job_id = s.CharField()
    reward_source = s.ChoiceField(choices=REWARD_SOURCE_NAMES)


class SummaryPeople(s.Serializer):
    """The summary's fields from people's labels (`traces.results.summary.with_people`)."""

    num_labelled = s.IntegerField(help_text="samples carrying a person's label")
    agreement = Agreement()
    reward_source = s.ChoiceField(
        choices=REWARD_SOURCE_NAMES,
        help_text="human_else_task_app: the score figures count people's scores where present",
    )
    num_scored_by_people = s.IntegerField(required=False)
    job_mean_score = s.FloatField(allow_null=True, required=False)
    job_pass_rate = s.FloatField(allow_null=True, required=False)


class CompareSeedPeople(s.Serializer):
    """What people said of a seed in each job compared (`jobs.labels.job_seed_verdicts`)."""

    base_label = s.CharField(allow_null=True, help_text="pass, fail or unsure; null: no label")
    candidate_label = s.CharField(allow_null=True, help_text="pass, fail or unsure; null: no label")
