from django.urls import path

from jobs import api, api_numbers, sse
from jobs.verifier import api as verifier_api

urlpatterns = [
    path("eval/jobs", api.JobListCreateView.as_view(), name="job-list"),
    path("eval/jobs/<str:job_id>", api.JobDetailView.as_view(), name="job-detail"),
    path("eval/jobs/<str:job_id>/results", api.JobResultsView.as_view(), name="job-results"),
    path("eval/jobs/<str:job_id>/traces", api.JobTracesView.as_view(), name="job-traces"),
    path("eval/jobs/<str:job_id>/seeds/<str:seed>", api.SeedTraceView.as_view(), name="job-seed"),
    path("eval/jobs/<str:job_id>/cancel", api.JobCancelView.as_view(), name="job-cancel"),
    path("eval/jobs/<str:job_id>/events", api.JobEventsView.as_view(), name="job-events"),
    path("eval/jobs/<str:job_id>/judge", verifier_api.JobJudgeView.as_view(), name="job-judge"),
    path("eval/jobs/<str:job_id>/rerun", api_numbers.JobRerunView.as_view(), name="job-rerun"),
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
