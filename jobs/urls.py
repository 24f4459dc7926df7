from django.urls import path

from jobs import api, sse

urlpatterns = [
    path("eval/jobs", api.JobListCreateView.as_view(), name="job-list"),
    path("eval/jobs/<str:job_id>", api.JobDetailView.as_view(), name="job-detail"),
    path("eval/jobs/<str:job_id>/results", api.JobResultsView.as_view(), name="job-results"),
    path("eval/jobs/<str:job_id>/traces", api.JobTracesView.as_view(), name="job-traces"),
    path("eval/jobs/<str:job_id>/seeds/<str:seed>", api.SeedTraceView.as_view(), name="job-seed"),
    path("eval/jobs/<str:job_id>/cancel", api.JobCancelView.as_view(), name="job-cancel"),
    path("eval/jobs/<str:job_id>/events", api.JobEventsView.as_view(), name="job-events"),
    path("eval/jobs/<str:job_id>/events/stream", sse.job_events_stream, name="job-events-stream"),
]
