from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView

from evalhub.health import healthz
from jobs.urls import unprefixed_urlpatterns

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("api/schema", SpectacularAPIView.as_view(), name="openapi-schema"),
    path("api/docs", SpectacularRedocView.as_view(url_name="openapi-schema"), name="api-docs"),
    path("api/", include("jobs.urls")),
    path("admin/", admin.site.urls),
    path("", include(unprefixed_urlpatterns)),
    path("", include("frontend.urls")),
]
