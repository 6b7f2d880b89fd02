"""The user's own profile page: preferences and personal API tokens (under /accounts/profile/)."""

from django.urls import path

from portal import views_account

app_name = "profile"

urlpatterns = [
    path("", views_account.profile, name="index"),
    path("tokens/", views_account.token_new, name="token_create"),
    path("tokens/<int:pk>/revoke/", views_account.token_delete, name="token_revoke"),
]
