"""The notification centre and its settings, under /notifications/ (namespace ``notifications``)."""

from django.urls import path

from leasing.notify import views

app_name = "notifications"
urlpatterns = [
    path("", views.notification_list, name="list"),
    path("bell/", views.notification_bell, name="bell"),
    path("<int:pk>/read/", views.notification_read, name="read"),
    path("read-all/", views.notification_read_all, name="read_all"),
    path("settings/", views.notification_settings, name="settings"),
    path("settings/webhooks/", views.webhook_add, name="webhook_add"),
    path("settings/webhooks/<int:pk>/delete/", views.webhook_remove, name="webhook_delete"),
    path("settings/webhooks/<int:pk>/test/", views.webhook_send_test, name="webhook_test"),
]
