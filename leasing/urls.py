from django.urls import path

from leasing.advisor import urls as advisor_urls
from leasing.lifecycle import views as lease_views

app_name = "leasing"
urlpatterns = [
    *advisor_urls.urlpatterns,
    path("", lease_views.lease_list, name="list"),
    path("new/", lease_views.lease_new, name="new"),
    path("preview/", lease_views.lease_preview, name="preview"),
    path("calendar/", lease_views.calendar, name="calendar"),
    path("calendar/<slug:slug>/", lease_views.calendar, name="calendar_model"),
    path("<int:pk>/", lease_views.lease_detail, name="detail"),
    path("<int:pk>/release/", lease_views.lease_release, name="release"),
    path("<int:pk>/cancel/", lease_views.lease_cancel, name="cancel"),
    path("<int:pk>/extend/", lease_views.lease_extend, name="extend"),
    path("<int:pk>/resize/", lease_views.lease_resize, name="resize"),
]
