"""Reports and monthly statements, under /reports/ (namespace ``reports``)."""

from django.urls import path

from leasing.billing import views

app_name = "reports"
urlpatterns = [
    path("", views.report, name="index"),
    path(
        "statements/<slug:slug>/<int:year>-<int:month>/",
        views.statement,
        name="statement",
    ),
]
