from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from leasing.lifecycle import urls as lease_urls
from portal import metrics

urlpatterns = [
    path("", include("portal.site_urls")),
    path("inventory/", include("inventory.urls")),
    path("leases/", include("leasing.lifecycle.urls")),
    path("leases/", include((lease_urls.telemetry_urlpatterns, "telemetry"))),
    path("notifications/", include("leasing.notify.urls")),
    path("reports/", include("leasing.billing.urls")),
    path("api/v1/", include("portal.api_urls")),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("metrics", metrics.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("accounts/", include("allauth.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
]
