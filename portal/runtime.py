"""How a long-lived portal process (a gunicorn worker, a Celery child) treats Python's cyclic
garbage collector once the app is loaded.

* ``gc.freeze()``: what is loaded now (Django, the apps, their modules) lives as long as the
  process; the collector no longer scans it, so a full collection scans only what requests
  made since.
* A first-generation threshold of ``YOUNG_THRESHOLD`` objects instead of 700: a request
  that reads or replays a long queue's picture allocates tens of thousands of objects, and
  at 700 it set off a young collection every few hundred of them and a full one every few
  requests; a full collection in a process holding such a picture paused a request by
  40-100 ms (docs/performance.md, "Planner cost"). Reference counting frees nearly all of
  it anyway; the collector is only for cycles.
"""

import gc

YOUNG_THRESHOLD = 20_000


def settle_gc() -> None:
    """Call once, when the app is loaded and before serving anything."""
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
