"""The embedded default's broker: a message file is never seen half-written, and a message that
cannot be decoded does not stop the consumer (issue 14: the demo's worker died of
``Unrecoverable error: JSONDecodeError`` reading a file another process was still writing)."""

from __future__ import annotations

import os
import runpy
import threading
from pathlib import Path
from unittest import mock

import pytest
from kombu import Connection, Exchange, Queue
from kombu.transport import filesystem

from portal import celery_broker

TRANSPORT = "portal.celery_broker:Transport"


@pytest.fixture(autouse=True)
def fresh_broker_state(monkeypatch):
    """kombu keeps the filesystem transport's bindings per process, not per folder: each test
    gets its own folders, so it gets its own bindings too."""
    from kombu.transport.virtual import BrokerState

    monkeypatch.setattr(filesystem.Transport, "global_state", BrokerState())
    monkeypatch.setattr(celery_broker.Transport, "global_state", BrokerState(), raising=False)


def _options(root: Path) -> dict:
    for sub in ("in", "control"):
        (root / sub).mkdir(exist_ok=True)
    return {
        "data_folder_in": str(root / "in"),
        "data_folder_out": str(root / "in"),
        "control_folder": str(root / "control"),
        "store_processed": False,
    }


def _connection(root: Path, transport: str = TRANSPORT) -> Connection:
    return Connection("filesystem://", transport=transport, transport_options=_options(root))


def test_the_celery_app_connects_through_the_atomic_transport(settings):
    from portal.celery import app

    if not settings.CELERY_BROKER_URL.startswith("filesystem://"):
        pytest.skip("runs against the embedded default's broker only")
    with app.connection_for_write() as conn:
        assert isinstance(conn.transport, celery_broker.Transport)


def _settings(monkeypatch, tmp_path, broker_url: str | None) -> dict:
    monkeypatch.setenv("CARDPOOL_VAR_DIR", str(tmp_path))
    if broker_url is None:
        monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    else:
        monkeypatch.setenv("CELERY_BROKER_URL", broker_url)
    return runpy.run_path(str(Path(__file__).resolve().parents[2] / "portal" / "settings.py"))


def test_the_default_broker_uses_the_atomic_transport(monkeypatch, tmp_path):
    conf = _settings(monkeypatch, tmp_path, None)
    assert conf["CELERY_BROKER_URL"].startswith("filesystem://")
    assert conf["CELERY_BROKER_TRANSPORT"] == TRANSPORT
    assert (tmp_path / "broker" / "rejected").is_dir()


def test_production_redis_broker_is_unchanged(monkeypatch, tmp_path):
    conf = _settings(monkeypatch, tmp_path, "redis://127.0.0.1:6379/0")
    assert "CELERY_BROKER_TRANSPORT" not in conf
    assert conf["CELERY_BROKER_TRANSPORT_OPTIONS"] == {"visibility_timeout": 3600}


def test_a_message_round_trips(tmp_path):
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue("jobs")
        queue.put({"lease": 7})
        assert queue.get(timeout=1).payload == {"lease": 7}
        queue.close()


def _half_written_message(root: Path) -> None:
    """What kombu's own publisher leaves visible between ``open(name, "wb")`` and the write."""
    (root / "in" / "0000000001_x.jobs.msg").write_bytes(b'{"body": "eyJsZWFzZSI6')


@pytest.mark.parametrize("payload", [b"", b'{"body": "eyJsZWFzZSI6', b"\xff\xfe garbage"])
def test_an_undecodable_message_is_set_aside_and_the_next_one_delivered(tmp_path, payload, caplog):
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue("jobs")
        (tmp_path / "in" / "0000000001_x.jobs.msg").write_bytes(payload)
        queue.put({"lease": 8})
        assert queue.get(timeout=1).payload == {"lease": 8}
        queue.close()
    assert (tmp_path / "rejected" / "0000000001_x.jobs.msg").read_bytes() == payload
    assert "could not be decoded" in caplog.text


def test_kombus_own_transport_dies_on_a_half_written_message(tmp_path):
    """The crash the issue saw, reproduced on the transport the demo used before."""
    with _connection(tmp_path, transport="filesystem") as conn:
        queue = conn.SimpleQueue("jobs")
        _half_written_message(tmp_path)
        with pytest.raises(ValueError):  # JSONDecodeError: the worker's "Unrecoverable error"
            queue.get(timeout=1)
        queue.close()


def test_a_message_is_not_visible_to_a_consumer_until_it_is_complete(tmp_path):
    """A consumer polling while a publisher is stuck mid-write finds nothing, then the whole
    message: the file gets its ``.msg`` name only once written."""
    writing, resume = threading.Event(), threading.Event()
    real_open = open

    class SlowFile:
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):  # fileno, close: kombu's own publisher locks the file
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[:5])
            self.f.flush()
            writing.set()
            resume.wait(5)
            return self.f.write(data[5:])

    def slow_open(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return SlowFile(f) if "w" in mode else f

    with _connection(tmp_path) as conn, _connection(tmp_path) as other:
        consumer = conn.SimpleQueue("jobs")
        publisher = other.SimpleQueue("jobs")
        with (
            mock.patch.object(celery_broker, "open", slow_open, create=True),
            mock.patch.object(filesystem, "open", slow_open, create=True),
        ):
            thread = threading.Thread(target=publisher.put, args=({"lease": 9},))
            thread.start()
            assert writing.wait(5)
            try:
                with pytest.raises(consumer.Empty):
                    consumer.get(block=False)
            finally:
                resume.set()
                thread.join(5)
        assert consumer.get(timeout=1).payload == {"lease": 9}
        assert not (tmp_path / "rejected").exists()
        consumer.close()
        publisher.close()


def test_broadcast_tables_are_rewritten_whole(tmp_path):
    """Fanout (Celery's broadcasts) reads ``*.exchange`` tables that binds rewrite: a reader
    never sees a truncated table, and a bind from another process is not lost."""
    with _connection(tmp_path) as conn:
        channel = conn.default_channel
        exchange = Exchange("events", type="fanout")
        for name in ("a", "b", "c"):
            Queue(name, exchange)(channel).declare()
        table = channel.get_table("events")
        assert {q.queue for q in table} == {"a", "b", "c"}
        assert not [p for p in os.listdir(tmp_path / "control") if p.endswith(".tmp")]
        Queue("b", exchange)(channel).delete()
        # kombu's virtual channel unbinds on delete; the table keeps the others
        channel._delete("b", "events", "b", "")
        assert {q.queue for q in channel.get_table("events")} == {"a", "c"}


def test_a_garbled_broadcast_table_is_ignored_not_fatal(tmp_path, caplog):
    with _connection(tmp_path) as conn:
        channel = conn.default_channel
        (tmp_path / "control" / "events.exchange").write_bytes(b'[["", "", "a"], ["')
        assert channel.get_table("events") == []
        assert "could not be decoded" in caplog.text
    with _connection(tmp_path, transport="filesystem") as conn:
        with pytest.raises(ValueError):
            conn.default_channel.get_table("events")
    assert filesystem.Channel.get_table is not celery_broker.Channel.get_table
