"""People's labels of samples (`jobs.labels`) and a job's agreement figures (`jobs.agreement`):

- `GET  /api/eval/jobs/{id}/seeds/{seed}/labels?repeat=`: the labels the sample carries;
- `POST /api/eval/jobs/{id}/seeds/{seed}/labels?repeat=`: the caller's label of it, made
  (201) or edited (200);
- `GET  /api/eval/jobs/{id}/labels`: every label of the job, and its agreement figures;
- `PUT  /api/eval/jobs/{id}/reward_source`: whether the job's score figures take people's
  labels where present (`human_else_task_app`) or not (`job`).
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import labels, selectors
from jobs.api import review_answers as answers
from jobs.api.answers import ERRORS
from jobs.api.inputs import TAG_RE, body_parsed
from jobs.api.jobs import seed_run_requested
from jobs.fields import StrictNumberField, text_problem
from jobs.models import EvalJob, RewardSource, SeedRun, Verdict
from traces.redaction import job_redactor


class LabelInput(serializers.Serializer):
    verdict = serializers.ChoiceField(choices=Verdict.values)
    score = StrictNumberField(min_value=0.0, max_value=1.0, required=False, allow_null=True)
    notes = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, max_length=labels.MAX_NOTES_CHARS,
        trim_whitespace=False,
    )  # fmt: skip
    tags = serializers.ListField(
        child=serializers.RegexField(
            TAG_RE, max_length=64,
            error_messages={"invalid": "a tag is 1-64 letters, digits and . _ - : / +"},
        ),
        required=False, allow_null=True, max_length=labels.MAX_LABEL_TAGS,
    )  # fmt: skip

    def validate_notes(self, value: str | None) -> str:
        if value and (problem := text_problem(value)):
            raise serializers.ValidationError(problem)
        return value or ""

    def change(self) -> labels.LabelChange:
        d = self.validated_data
        return labels.LabelChange(
            verdict=Verdict(d["verdict"]),
            score=d.get("score"),
            notes=d.get("notes") or "",
            tags=tuple(dict.fromkeys(d.get("tags") or ())),
        )


TAG = "human review"
REPEAT = OpenApiParameter("repeat", int, description="which sample of the seed (default 0)")


def _sample_labels(seed_run: SeedRun, job: EvalJob) -> dict:
    return {
        "job_id": seed_run.job_id,
        "seed": seed_run.seed,
        "repeat": seed_run.repeat,
        "labels": job_redactor(job=job).value(labels.labels_of([seed_run])[seed_run.id]),
    }


class SeedLabelsView(APIView):
    @extend_schema(
        parameters=[REPEAT], responses={200: answers.SampleLabels, **ERRORS},
        summary="The labels people gave one sample", tags=[TAG],
    )  # fmt: skip
    def get(self, request: Request, job_id: str, seed: str) -> Response:
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        return Response(_sample_labels(seed_run_requested(request, job=job, seed=seed), job))

    @extend_schema(
        parameters=[REPEAT], request=LabelInput,
        responses={200: answers.SampleLabels, 201: answers.SampleLabels, **ERRORS},
        summary="Label one sample (your label: made, or edited if you made one)", tags=[TAG],
    )  # fmt: skip
    def post(self, request: Request, job_id: str, seed: str) -> Response:
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        seed_run = seed_run_requested(request, job=job, seed=seed)
        data = body_parsed(request.data, LabelInput)
        _, created = labels.label_save(seed_run=seed_run, author=request.user, change=data.change())
        return Response(
            _sample_labels(seed_run, job),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class JobLabelsView(APIView):
    @extend_schema(
        responses={200: answers.JobLabels, **ERRORS},
        summary="Every label of a job's samples, and how the task app, the judge and people agree",
        tags=[TAG],
    )
    def get(self, request: Request, job_id: str) -> Response:
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        return Response(
            {
                "job_id": job.id,
                "num_samples": job.num_samples,
                "labels": job_redactor(job=job).value(labels.job_labels(job=job)),
                **labels.job_people(job=job),
            }
        )


REWARD_SOURCES = dict(zip(answers.REWARD_SOURCE_NAMES, RewardSource.values, strict=True))


class RewardSourceInput(serializers.Serializer):
    reward_source = serializers.ChoiceField(choices=list(REWARD_SOURCES))


class JobRewardSourceView(APIView):
    @extend_schema(
        request=RewardSourceInput, responses={200: answers.RewardSourceSet, **ERRORS},
        tags=[TAG], summary="Take the job's score figures from people's labels where present, or not",
    )  # fmt: skip
    def put(self, request: Request, job_id: str) -> Response:
        job = selectors.job_owned(owner=request.user, job_id=job_id)
        data = body_parsed(request.data, RewardSourceInput)
        source = REWARD_SOURCES[data.validated_data["reward_source"]]
        labels.job_reward_source_set(job=job, source=source)
        return Response({"job_id": job.id, "reward_source": job.reward_source or "job"})
