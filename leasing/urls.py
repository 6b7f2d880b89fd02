from django.urls import path

app_name = "leasing"
urlpatterns: list = []
