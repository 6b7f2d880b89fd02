"""Telemetry pages under /leases/ (included by portal/urls.py)."""

from django.urls import path

from inventory import views_telemetry

app_name = "telemetry"
urlpatterns = [
    path(
        "<int:pk>/utilisation/",
        views_telemetry.lease_utilisation,
        name="lease_utilisation",
    ),
]
