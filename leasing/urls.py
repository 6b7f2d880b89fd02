from django.urls import path

from leasing import urls_estimate, views

app_name = "leasing"
urlpatterns = [
    *urls_estimate.urlpatterns,
    path("", views.lease_list, name="list"),
    path("new/", views.lease_new, name="new"),
    path("preview/", views.lease_preview, name="preview"),
    path("calendar/", views.calendar, name="calendar"),
    path("calendar/<slug:slug>/", views.calendar, name="calendar_model"),
    path("<int:pk>/", views.lease_detail, name="detail"),
    path("<int:pk>/release/", views.lease_release, name="release"),
    path("<int:pk>/cancel/", views.lease_cancel, name="cancel"),
    path("<int:pk>/extend/", views.lease_extend, name="extend"),
    path("<int:pk>/resize/", views.lease_resize, name="resize"),
]
