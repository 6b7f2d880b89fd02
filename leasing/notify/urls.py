"""The notification centre and its settings, under /notifications/ (namespace ``notifications``)."""

from django.urls import path

from leasing import views_notify

app_name = "notifications"
urlpatterns = [
    path("", views_notify.notification_list, name="list"),
    path("<int:pk>/read/", views_notify.notification_read, name="read"),
    path("read-all/", views_notify.notification_read_all, name="read_all"),
    path("settings/", views_notify.notification_settings, name="settings"),
    path("settings/webhooks/", views_notify.webhook_add, name="webhook_add"),
    path("settings/webhooks/<int:pk>/delete/", views_notify.webhook_remove, name="webhook_delete"),
    path("settings/webhooks/<int:pk>/test/", views_notify.webhook_send_test, name="webhook_test"),
]
