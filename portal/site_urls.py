from django.urls import include, path

from leasing.teams import views as team_views
from portal import views, views_account, views_pool

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("pool/", views_pool.pool, name="pool"),
    path("accounts/profile/", include("portal.urls_account")),
    path("teams/", team_views.team_list, name="team_list"),
    path("teams/<slug:slug>/", team_views.team_detail, name="team_detail"),
    path("teams/<slug:slug>/limits/", team_views.team_set_limit, name="team_set_limit"),
    path("teams/<slug:slug>/invite/", views_account.team_invite, name="team_invite"),
    path("teams/<slug:slug>/members/", team_views.team_member_add, name="team_member_add"),
    path(
        "teams/<slug:slug>/members/<int:pk>/remove/",
        team_views.team_member_remove,
        name="team_member_remove",
    ),
    path("teams/<slug:slug>/idle/", team_views.team_set_idle_policy, name="team_idle_policy"),
    path("teams/<slug:slug>/quotas/", team_views.team_set_quota, name="team_set_quota"),
    path(
        "teams/<slug:slug>/approvals/<int:pk>/<str:decision>/",
        team_views.team_decide,
        name="team_decide",
    ),
]
