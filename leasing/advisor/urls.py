"""The ask-by-task page, included into ``leasing.lifecycle.urls`` (namespace ``leasing``)."""

from django.urls import path

from leasing.advisor import views

urlpatterns = [
    path("estimate/", views.estimate, name="estimate"),
]
