"""REST API for the inventory (card models, nodes, cards)."""


def register(router) -> None:
    pass
