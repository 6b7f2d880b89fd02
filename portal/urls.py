from csp.decorators import csp_update
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView

from leasing.lifecycle import urls as lease_urls
from portal import metrics

API_DOCS_CSP = {"style-src": ["'unsafe-inline'"], "worker-src": ["blob:"]}

# Redoc (1.1 MB; Swagger UI's bundle alone is over the 1.5 MB page budget), for signed-in
# users unless CARDPOOL_API_DOCS_PUBLIC (the schema's permission is set likewise). The page
# itself has nothing inline, but Redoc styles what it draws with <style> elements and style
# attributes and runs its search in a worker built from a blob: address, so this one view's
# policy allows inline styles and blob: workers; scripts stay 'self' only.
api_docs = csp_update(API_DOCS_CSP)(
    SpectacularRedocView.as_view(url_name="api-schema", template_name="portal/api_docs.html")
)
if not settings.CARDPOOL_API_DOCS_PUBLIC:
    api_docs = login_required(api_docs)

urlpatterns = [
    path("", include("portal.site_urls")),
    path("", include("leasing.workbench.urls")),
    path("inventory/", include("inventory.urls")),
    path("leases/", include("leasing.lifecycle.urls")),
    path("leases/", include((lease_urls.telemetry_urlpatterns, "telemetry"))),
    path("notifications/", include("leasing.notify.urls")),
    path("alerts/", include("leasing.health.urls")),
    path("reports/", include("leasing.billing.urls")),
    path("api/v1/", include("portal.api_urls")),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/docs/", api_docs, name="api-docs"),
    path("metrics", metrics.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("accounts/", include("allauth.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
]
