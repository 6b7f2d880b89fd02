"""``python3 cardpool.py demo``'s launcher: a child that dies is started again and the others keep
running (issue 14: the worker crashed and the launcher took the web server down with it)."""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import cardpool  # noqa: E402  (the launcher is a script at the top of the repository)

sys.path.remove(str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.status


def _until(predicate, step, limit: float = 20.0) -> None:
    """Drive the supervisor until ``predicate`` holds; the limit only bounds a broken run."""
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, "gave up waiting"
        step()
        time.sleep(0.02)


@pytest.fixture
def supervisor(tmp_path):
    port = _free_port()
    lines: list[str] = []
    web = cardpool.Child(
        "web",
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
    )
    worker = cardpool.Child("worker", [sys.executable, "-c", "import sys; sys.exit(3)"])
    sup = cardpool.Supervisor(
        [web, worker],
        backoff=0.05,
        max_backoff=0.2,
        state_file=tmp_path / "demo-processes.json",
        log=lines.append,
    )
    sup.start()
    sup.port, sup.lines, sup.web, sup.worker = port, lines, web, worker
    yield sup
    sup.stop()


def _serving(port: int) -> bool:
    try:
        return _get(f"http://127.0.0.1:{port}/") == 200
    except OSError:
        return False


def test_a_crashing_worker_is_restarted_and_the_web_keeps_serving(supervisor):
    _until(lambda: _serving(supervisor.port), supervisor.step)
    web_pid = supervisor.web.proc.pid

    _until(lambda: supervisor.worker.restarts >= 3, supervisor.step)

    assert _serving(supervisor.port)
    assert supervisor.web.proc.pid == web_pid and supervisor.web.proc.poll() is None
    assert any("worker" in line and "exited with code 3" in line for line in supervisor.lines)
    assert any("worker restarted" in line for line in supervisor.lines)
    state = json.loads((Path(supervisor.state_file)).read_text())
    assert state["children"]["worker"]["restarts"] == supervisor.worker.restarts
    assert state["children"]["web"] == {"pid": web_pid, "restarts": 0}


def test_the_pause_before_a_restart_grows_while_a_child_keeps_crashing(supervisor):
    _until(lambda: supervisor.worker.restarts >= 4, supervisor.step)
    pauses = [
        float(line.rsplit("in ", 1)[1].rstrip(" s"))
        for line in supervisor.lines
        if "exited" in line and line.startswith("worker")
    ]
    assert pauses[:4] == [0.05, 0.1, 0.2, 0.2]


def test_stop_ends_every_child(supervisor):
    _until(lambda: _serving(supervisor.port), supervisor.step)
    supervisor.stop()
    assert supervisor.web.proc.poll() is not None
    assert not _serving(supervisor.port)


def test_the_demo_runs_without_debug_unless_asked(tmp_path):
    """The demo is the production shape (own error pages, no debug 404 listing every URL)."""
    from portal.secret_key import checked_secret_key

    env = cardpool.demo_env({"CARDPOOL_VAR_DIR": str(tmp_path), "CARDPOOL_PORT": "8150"})
    assert env.get("CARDPOOL_DEBUG", "false") == "false"
    assert "127.0.0.1" in env["CARDPOOL_ALLOWED_HOSTS"].split(",")
    assert env["CARDPOOL_SECURE_COOKIES"] == "false"  # plain HTTP on this machine
    key = Path(env["CARDPOOL_SECRET_KEY_FILE"]).read_text()
    assert checked_secret_key(key, debug=False) == key  # its own key, kept between starts
    assert cardpool.demo_env({"CARDPOOL_VAR_DIR": str(tmp_path)})["CARDPOOL_SECRET_KEY_FILE"]
    assert Path(env["CARDPOOL_SECRET_KEY_FILE"]).read_text() == key
    asked = cardpool.demo_env({"CARDPOOL_VAR_DIR": str(tmp_path), "CARDPOOL_DEBUG": "true"})
    assert asked["CARDPOOL_DEBUG"] == "true"


@pytest.mark.parametrize(
    ("cores", "args", "expected"),
    [
        (2, [], ["-n", "2"]),
        (16, ["tests/leasing"], ["-n", "4"]),
        (1, [], []),
        (2, ["-n", "0"], []),
        (2, ["-n0"], []),
        (2, ["--numprocesses=3"], []),
        (2, ["-p", "no:xdist"], []),
    ],
)
def test_the_suite_runs_on_every_core_unless_told(monkeypatch, cores, args, expected):
    monkeypatch.setattr(cardpool.os, "sched_getaffinity", lambda _pid: set(range(cores)))
    assert cardpool.test_workers(args) == expected
