from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView

from evalhub.health import healthz
from evalhub.metrics_endpoint import metrics_view
from jobs.api.urls import unprefixed_urlpatterns

# ReDoc with the sidecar's script and no web fonts: everything the page loads is ours.
API_DOCS = SpectacularRedocView.as_view(
    url_name="openapi-schema", template_name="frontend/api_docs.html"
)

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("favicon.ico", RedirectView.as_view(url=static("frontend/favicon.ico"))),
    path("api/schema", SpectacularAPIView.as_view(), name="openapi-schema"),
    path("api/docs", API_DOCS, name="api-docs"),
    path("api/docs/", API_DOCS),
    path("api/", include("jobs.api.urls")),
    path("admin/", admin.site.urls),
    path("", include(unprefixed_urlpatterns)),
    path("", include("frontend.urls")),
]

# What matches nothing, or fails: JSON under /api/, the dashboard's page elsewhere.
handler404 = "evalhub.errors.not_found"
handler500 = "evalhub.errors.server_error"
