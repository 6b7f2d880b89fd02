"""The worker's log is not buried under the 2 s tick."""

import logging

from portal.logfilters import RoutineTaskFilter


def record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("celery.app.trace", level, __file__, 1, message, None, None)


def test_routine_tick_lines_are_dropped_but_not_its_errors_nor_other_tasks():
    quiet = RoutineTaskFilter()
    assert not quiet.filter(record(logging.INFO, "Task leasing.tasks.tick[1] succeeded"))
    assert not quiet.filter(record(logging.INFO, "Scheduler: Sending due task leasing-tick"))
    assert quiet.filter(record(logging.ERROR, "Task leasing.tasks.tick[1] raised unexpected"))
    assert quiet.filter(record(logging.INFO, "Task leasing.tasks.provision_lease[2] succeeded"))
