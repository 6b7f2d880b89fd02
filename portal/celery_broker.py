"""The embedded default's broker: kombu's filesystem transport without its write race.

kombu's filesystem transport creates a message file under its final name and only then writes
it (``open(name, "wb")``, lock, write). A consumer in another process lists the folder, moves
the file away and reads it without the lock, so it can read an empty or half-written file; the
``JSONDecodeError`` that follows escapes the consumer and Celery stops the worker
("Unrecoverable error"). The exchange tables (``*.exchange``, used by broadcasts) are rewritten
in place the same way.

Here every file is written under a name nobody reads (``.tmp``, not ``.msg``) and renamed into
place when complete: a rename within one folder is atomic on POSIX, so a reader sees a whole
file or none. A message that still cannot be decoded (written by something else, a full disk)
is moved to ``rejected/`` with an error in the log, and the consumer carries on.

Selected by ``CELERY_BROKER_TRANSPORT`` in portal/settings.py when the broker URL is
``filesystem://``; production's Redis broker does not use it.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the whole file or no file at all."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


class Channel(filesystem.Channel):
    """A filesystem channel whose files appear only once fully written."""

    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        try:
            write_atomically(os.path.join(self.data_folder_out, name), str_to_bytes(dumps(payload)))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc

    def _get(self, queue):
        wanted = f"{queue}.msg"
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            # Claim by renaming within the folder (atomic, unlike kombu's move to /tmp, which
            # copies across file systems): of two consumers, one wins and the other moves on.
            claimed = os.path.join(self.data_folder_in, f".{name}.{uuid.uuid4().hex}.claimed")
            try:
                os.rename(os.path.join(self.data_folder_in, name), claimed)
            except OSError:
                continue
            try:
                with open(claimed, "rb") as f:
                    payload = f.read()
                if self.store_processed:
                    shutil.move(claimed, os.path.join(self.processed_folder, name))
                else:
                    os.remove(claimed)
            except OSError as exc:
                raise ChannelError(f"Cannot read file {claimed!r} from queue.") from exc
            try:
                return loads(bytes_to_str(payload))
            except ValueError:
                self._reject(name, payload)
        raise Empty()

    def _reject(self, name: str, payload: bytes) -> None:
        """Keep an undecodable message for a person to look at, out of every queue."""
        folder = Path(self.data_folder_in).parent / "rejected"
        try:
            folder.mkdir(exist_ok=True)
            write_atomically(folder / name, payload)
        except OSError:
            pass
        log.error(
            "broker: message %s could not be decoded (%d bytes); moved to %s, consumer continues",
            name,
            len(payload),
            folder,
        )

    def _write_table(self, exchange, queues) -> None:
        try:
            write_atomically(self._exchange_file(exchange), str_to_bytes(dumps(queues)))
        except OSError as exc:
            raise ChannelError(f"Cannot write the table of exchange {exchange!r}") from exc

    def get_table(self, exchange):
        try:
            raw = self._exchange_file(exchange).read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open the table of exchange {exchange!r}") from exc
        try:
            return [filesystem.exchange_queue_t(*q) for q in loads(bytes_to_str(raw))]
        except ValueError:
            log.error("broker: the table of exchange %r could not be decoded; ignored", exchange)
            return []

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        self.control_folder.mkdir(exist_ok=True)
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._table_lock(exchange):
            queues = self.get_table(exchange)
            if entry not in queues:
                self._write_table(exchange, [entry, *queues])

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        super(filesystem.Channel, self)._delete(
            queue, exchange, routing_key, pattern, *args, **kwargs
        )
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._table_lock(exchange):
            queues = self.get_table(exchange)
            if entry in queues:
                self._write_table(exchange, [q for q in queues if q != entry])

    def _table_lock(self, exchange):
        """Serialise read-modify-write of one exchange table across processes (a lock file)."""
        return _FileLock(Path(f"{self._exchange_file(exchange)}.lock"))


class _FileLock:
    """An exclusive ``flock`` on a file of its own, held for a ``with`` block."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = None

    def __enter__(self):
        self.file = open(self.path, "ab")
        filesystem.lock(self.file, filesystem.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        filesystem.unlock(self.file)
        self.file.close()


class Transport(filesystem.Transport):
    """kombu's filesystem transport with :class:`Channel`'s atomic writes."""

    Channel = Channel
