app_name = "leasing"
urlpatterns: list = []
