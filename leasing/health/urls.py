"""The operators' alerts page, under /alerts/ (namespace ``alerts``)."""

from django.urls import path

from leasing.health import views

app_name = "alerts"
urlpatterns = [
    path("", views.alert_list, name="list"),
    path("<int:pk>/acknowledge/", views.alert_acknowledge, name="acknowledge"),
    path("<int:pk>/silence/", views.alert_silence, name="silence"),
]
