"""The ask-by-task page, included into ``leasing.urls`` (namespace ``leasing``)."""

from django.urls import path

from leasing import views_estimate

urlpatterns = [
    path("estimate/", views_estimate.estimate, name="estimate"),
]
