"""REST API for leases."""

extra_urlpatterns: list = []


def register(router) -> None:
    pass
