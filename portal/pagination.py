"""The API's page size rules (its own module: the settings name it, and portal.api imports
DRF's views, which read the settings)."""

from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    """?limit=&offset= pages of at most 1000 rows.

    Without a cap a huge ?limit= (10**35) reached the database as a LIMIT that overflows a
    64-bit integer: a 500 (found by schemathesis). An offset past the end gives an empty page
    before any query is sliced, so it needs no cap of its own.
    """

    max_limit = 1000
