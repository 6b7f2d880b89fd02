from django.urls import path

from inventory import views

app_name = "inventory"
urlpatterns = [
    path("", views.catalogue, name="catalogue"),
    path("models/<slug:slug>/", views.card_model_detail, name="card_model"),
    path("nodes/", views.node_list, name="nodes"),
    path("nodes/<str:hostname>/", views.node_detail, name="node"),
]
