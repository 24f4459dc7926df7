from django.urls import path

from jobs.api import jobs as api
from jobs.api import judge as verifier_api
from jobs.api import labels as api_labels
from jobs.api import numbers as api_numbers
from jobs.api import replays as api_replays
from jobs.api import sse

urlpatterns = [
    path("eval/jobs", api.JobListCreateView.as_view(), name="job-list"),
    path("eval/jobs/<str:job_id>", api.JobDetailView.as_view(), name="job-detail"),
    path("eval/jobs/<str:job_id>/results", api.JobResultsView.as_view(), name="job-results"),
    path("eval/jobs/<str:job_id>/traces", api.JobTracesView.as_view(), name="job-traces"),
    path("eval/jobs/<str:job_id>/seeds/<str:seed>", api.SeedTraceView.as_view(), name="job-seed"),
    path(
        "eval/jobs/<str:job_id>/seeds/<str:seed>/labels",
        api_labels.SeedLabelsView.as_view(),
        name="job-seed-labels",
    ),
    path("eval/jobs/<str:job_id>/labels", api_labels.JobLabelsView.as_view(), name="job-labels"),
    path(
        "eval/jobs/<str:job_id>/reward_source",
        api_labels.JobRewardSourceView.as_view(),
        name="job-reward-source",
    ),
    path("eval/jobs/<str:job_id>/cancel", api.JobCancelView.as_view(), name="job-cancel"),
    path("eval/jobs/<str:job_id>/events", api.JobEventsView.as_view(), name="job-events"),
    path("eval/jobs/<str:job_id>/judge", verifier_api.JobJudgeView.as_view(), name="job-judge"),
    path("eval/jobs/<str:job_id>/rerun", api_numbers.JobRerunView.as_view(), name="job-rerun"),
    path("eval/jobs/<str:job_id>/replay", api_replays.JobReplayView.as_view(), name="job-replay"),
    path(
        "eval/jobs/<str:job_id>/results.csv",
        api_numbers.JobResultsCsvView.as_view(),
        name="job-results-csv",
    ),
    path(
        "eval/jobs/<str:job_id>/export/sft.jsonl",
        api_numbers.JobSftExportView.as_view(),
        name="job-export-sft",
    ),
    path(
        "eval/jobs/<str:job_id>/export/inspect",
        api_numbers.JobInspectExportView.as_view(),
        name="job-export-inspect",
    ),
    path("eval/compare", api_numbers.CompareView.as_view(), name="job-compare"),
    path("eval/jobs/<str:job_id>/events/stream", sse.job_events_stream, name="job-events-stream"),
    # What newer synth-ai clients (0.6, 0.7) call beside the eval endpoints.
    path(
        "jobs/<str:job_id>/workflow-state",
        api.WorkflowStateView.as_view(),
        name="job-workflow-state",
    ),
    path(
        "v1/crypto/public-key",
        api.NotServedView.as_view(detail=api.SEALED_KEYS_NOT_SERVED),
        name="not-served-public-key",
    ),
    path(
        "v1/env-keys",
        api.NotServedView.as_view(detail=api.SEALED_KEYS_NOT_SERVED),
        name="not-served-env-keys",
    ),
]

# synth-ai 0.6-0.7's `EvalJob.stream_until_complete()` strips `/api` from the backend URL before
# it follows a job: the status and the events are served there too (mounted at the root).
unprefixed_urlpatterns = [
    path("eval/jobs/<str:job_id>", api.JobDetailView.as_view()),
    path("eval/jobs/<str:job_id>/events", api.JobEventsView.as_view()),
    path("eval/jobs/<str:job_id>/events/stream", sse.job_events_stream),
]
