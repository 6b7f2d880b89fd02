"""Reports and monthly statements, under /reports/ (namespace ``reports``)."""

from django.urls import path

from leasing import views_reports

app_name = "reports"
urlpatterns = [
    path("", views_reports.report, name="index"),
    path(
        "statements/<slug:slug>/<int:year>-<int:month>/",
        views_reports.statement,
        name="statement",
    ),
]
