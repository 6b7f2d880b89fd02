"""A whole queue pass over some card models, as a test (or a bench) asks for one: production
runs the pass through ``replan`` (a request, a release, the tick) for one model at a time."""

from __future__ import annotations

from leasing.scheduler.run import queue_advance

__all__ = ["queue_advance"]
