"""Session URLs (/sessions/…: the proxy passes a running session's requests on to it), the
lease page's open/stop buttons and the profile's SSH keys."""

from django.urls import path

from leasing.workbench import views

urlpatterns = [
    path("sessions/auth/", views.session_auth, name="session_auth"),
    path("_cardpool/session-login/", views.session_login, name="session_login"),
    path("sessions/<int:pk>/", views.session_page, name="session_page"),
    path("sessions/<int:pk>/<path:rest>", views.session_page, name="session_page_path"),
    path("leases/<int:pk>/session/", views.session_open, name="session_open"),
    path("leases/<int:pk>/session/go/", views.session_go, name="session_go"),
    path(
        "leases/<int:pk>/session/<int:session_pk>/stop/",
        views.session_stop,
        name="session_stop",
    ),
    path("leases/<int:pk>/environment/", views.lease_environment, name="lease_environment"),
    path("accounts/profile/ssh-keys/", views.ssh_key_add, name="ssh_key_add"),
    path("accounts/profile/ssh-keys/<int:pk>/remove/", views.ssh_key_remove, name="ssh_key_remove"),
]
