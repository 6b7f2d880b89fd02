from django.urls import include, path

from leasing import views_team
from portal import views, views_pool

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("pool/", views_pool.pool, name="pool"),
    path("accounts/profile/", include("portal.urls_account")),
    path("teams/", views_team.team_list, name="team_list"),
    path("teams/<slug:slug>/", views_team.team_detail, name="team_detail"),
    path("teams/<slug:slug>/limits/", views_team.team_set_limit, name="team_set_limit"),
    path("teams/<slug:slug>/quotas/", views_team.team_set_quota, name="team_set_quota"),
    path(
        "teams/<slug:slug>/approvals/<int:pk>/<str:decision>/",
        views_team.team_decide,
        name="team_decide",
    ),
]
