from django.urls import path

from inventory import views

app_name = "inventory"
urlpatterns = [
    path("", views.catalogue, name="catalogue"),
    path("models/<slug:slug>/", views.card_model_detail, name="card_model"),
    path("nodes/", views.node_list, name="nodes"),
    path("nodes/<str:hostname>/", views.node_detail, name="node"),
    path("nodes/<str:hostname>/drain/", views.node_drain, name="node_drain"),
    path("nodes/<str:hostname>/undrain/", views.node_undrain, name="node_undrain"),
    path("nodes/<str:hostname>/cards/<int:index>/faulty/", views.card_faulty, name="card_faulty"),
]
