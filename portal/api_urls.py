"""Everything under /api/v1/: each app registers its viewsets on the one router."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from inventory import api as inventory_api
from inventory import api_telemetry
from leasing import api as leasing_api
from leasing import api_notify, api_reports
from portal import api as portal_api

router = DefaultRouter()
inventory_api.register(router)
leasing_api.register(router)
api_notify.register(router)

urlpatterns = [
    path("auth/token/", portal_api.ObtainTokenView.as_view(), name="api-token"),
    *leasing_api.extra_urlpatterns,
    *api_reports.urlpatterns,
    *api_telemetry.urlpatterns,
    path("", include(router.urls)),
]
