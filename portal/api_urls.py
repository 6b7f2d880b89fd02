"""Everything under /api/v1/: each app registers its viewsets on the one router."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from inventory import api as inventory_api
from inventory import api_telemetry
from leasing.advisor import api as advisor_api
from leasing.billing import api as billing_api
from leasing.health import api as health_api
from leasing.lifecycle import api as lease_api
from leasing.lifecycle import api_agent, api_timeline
from leasing.notify import api as notify_api
from leasing.teams import api as team_api
from leasing.workbench import agent_api
from leasing.workbench import api as workbench_api
from portal import api as portal_api

router = DefaultRouter()
inventory_api.register(router)
lease_api.register(router)
team_api.register(router)
notify_api.register(router)
health_api.register(router)
workbench_api.register(router)

urlpatterns = [
    path("auth/token/", portal_api.ObtainTokenView.as_view(), name="api-token"),
    *advisor_api.urlpatterns,
    *billing_api.urlpatterns,
    *team_api.urlpatterns,
    *api_telemetry.urlpatterns,
    *api_agent.urlpatterns,
    *api_timeline.urlpatterns,
    *agent_api.urlpatterns,
    *workbench_api.urlpatterns,
    path("", include(router.urls)),
]
