"""Logging filters (LOGGING in portal/settings.py)."""

from __future__ import annotations

import logging

# The beat sends the tick every 2 s: three INFO lines each time (sent, received, succeeded)
# would bury everything else in a worker's log. What a tick does shows in the leases' events.
ROUTINE = ("leasing.tasks.tick", "leasing-tick")


class RoutineTaskFilter(logging.Filter):
    """Drop INFO and DEBUG lines about the routine tick; warnings and errors pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        message = record.getMessage()
        return not any(name in message for name in ROUTINE)
