"""The lease pages under /leases/ (namespace ``leasing``), with the ask-by-task page, and the
utilisation partial (namespace ``telemetry``, its name from when telemetry pages lived there)."""

from django.urls import path

from leasing.advisor import urls as advisor_urls
from leasing.lifecycle import views

app_name = "leasing"
urlpatterns = [
    *advisor_urls.urlpatterns,
    path("", views.lease_list, name="list"),
    path("new/", views.lease_new, name="new"),
    path("preview/", views.lease_preview, name="preview"),
    path("calendar/", views.calendar, name="calendar"),
    path("calendar/<slug:slug>/", views.calendar, name="calendar_model"),
    path("timeline/", views.timeline, name="timeline"),
    path("timeline/<slug:slug>/", views.timeline, name="timeline_model"),
    path("<int:pk>/", views.lease_detail, name="detail"),
    path("<int:pk>/release/", views.lease_release, name="release"),
    path("<int:pk>/cancel/", views.lease_cancel, name="cancel"),
    path("<int:pk>/extend/", views.lease_extend, name="extend"),
    path("<int:pk>/resize/", views.lease_resize, name="resize"),
    path("changes/<int:pk>/<str:decision>/", views.change_decide, name="change_decide"),
    path("<int:pk>/release-retry/", views.lease_release_retry, name="release_retry"),
    path("<int:pk>/release-resolve/", views.lease_release_resolve, name="release_resolve"),
]

# Included by portal/urls.py as include((telemetry_urlpatterns, "telemetry")).
telemetry_urlpatterns = [
    path("<int:pk>/utilisation/", views.lease_utilisation, name="lease_utilisation"),
]
