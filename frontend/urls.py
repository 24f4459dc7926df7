from django.contrib.auth import views as auth_views
from django.urls import path, register_converter

from frontend import numbers_views, review_views, views


class SignedIntConverter:
    """Seeds are any 64-bit integers, negative ones included."""

    regex = "-?[0-9]+"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(SignedIntConverter, "seed")

app_name = "frontend"

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="frontend/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.job_list, name="job-list"),
    path("jobs/progress.json", views.job_list_progress, name="job-list-progress"),
    path("keys/", views.api_keys, name="api-keys"),
    path("keys/<str:prefix>/revoke", views.api_key_revoke_view, name="api-key-revoke"),
    path("jobs/<str:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<str:job_id>/progress.json", views.job_progress, name="job-progress"),
    path("jobs/<str:job_id>/cancel", views.job_cancel, name="job-cancel"),
    path("jobs/<str:job_id>/traces.zip", views.job_traces_zip, name="job-traces-zip"),
    path("jobs/<str:job_id>/seeds/<seed:seed>/", views.seed_detail, name="seed-detail"),
    path("jobs/<str:job_id>/rerun", numbers_views.job_rerun_view, name="job-rerun"),
    path("jobs/<str:job_id>/results.csv", numbers_views.job_results_csv, name="job-results-csv"),
    path("jobs/<str:job_id>/sft.jsonl", numbers_views.job_sft_jsonl, name="job-sft-jsonl"),
    path("jobs/<str:job_id>/inspect.json", numbers_views.job_inspect_log, name="job-inspect-log"),
    path("jobs/<str:job_id>/review/", review_views.review, name="review"),
    path("jobs/<str:job_id>/review/label", review_views.review_label, name="review-label"),
    path(
        "jobs/<str:job_id>/reward-source",
        review_views.review_reward_source,
        name="review-reward-source",
    ),
    path("compare/", numbers_views.compare, name="compare"),
    path("compare/seeds.csv", numbers_views.compare_csv, name="compare-csv"),
    path("compare/seeds/<seed:seed>/", numbers_views.compare_seed, name="compare-seed"),
]
