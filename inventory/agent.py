#!/usr/bin/env python3
"""cardpool-agent: read each card's utilisation, memory, temperature and power on a node and
post them to the portal's ``POST /api/v1/telemetry/``.

Standard library only (``pynvml`` from the ``nvidia-ml-py`` package is used when present), so
this one file can be copied to a node and run with ``python3 agent.py``: that is why it is one
module of some 780 lines rather than a package (it must stand alone on a node). The parsers are pure
functions; the portal's DCGM pull (``inventory.telemetry``) uses the same one.

Sources, in order: NVML (``pynvml``), ``nvidia-smi``, ``npu-smi info`` (Huawei Ascend);
or ``--dcgm URL`` to scrape a DCGM exporter. See docs/telemetry.md. With ``--sessions`` it
also runs the node's browser sessions and SSH keys for the local backend
(``agent_sessions.py``, copied beside it; docs/operations.md, "Sessions").

Each interval it also asks ``GET /api/v1/checkpoints/`` for leases on this node being
preempted that declared a checkpoint (local backend): it sends their signal to the processes
started with the lease's devices variable (``CUDA_VISIBLE_DEVICES=…`` naming one of its
cards) and runs their command, then reports ``POST /api/v1/checkpoints/<lease>/``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

__all__ = [
    "main",
    "parse_dcgm",
    "parse_npu_smi",
    "parse_nvidia_smi",
    "parse_prometheus",
    "read_nvml",
]

VERSION = "1"
USER_AGENT = f"cardpool-agent/{VERSION}"
DEFAULT_TOKEN_FILE = "/etc/cardpool/agent-token"
NVIDIA_SMI_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,uuid,utilization.gpu,memory.used,temperature.gpu,power.draw",
    "--format=csv,noheader,nounits",
]
COMMAND_TIMEOUT = 15  # seconds; a hung driver must not hang the agent
MAX_BACKOFF = 60  # seconds between two tries of one post, at most

Sample = dict[str, object]


class AgentError(Exception):
    """Something the operator has to fix; the message says what."""


# --- Parsers (pure) --------------------------------------------------------------------------

_MISSING = {"", "n/a", "[n/a]", "na", "-", "[not supported]", "not supported", "[unknown error]"}


def _number(text: str | None) -> float | None:
    """A reading, or None for the tools' many ways of saying "not available"."""
    if text is None:
        return None
    text = text.strip()
    if text.lower() in _MISSING:
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def parse_nvidia_smi(text: str) -> list[Sample]:
    """Parse ``nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,temperature.gpu,
    power.draw --format=csv,noheader,nounits``: one card per line, memory in MiB, power in W.
    """
    samples: list[Sample] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 6:
            raise ValueError(f"nvidia-smi line {number}: expected 6 fields, got {line!r}")
        index, uuid, util, memory, temperature, power = fields
        try:
            samples.append(
                {
                    "index": int(index),
                    "uuid": uuid,
                    "utilization_pct": _number(util),
                    "memory_used_mb": _number(memory),
                    "temperature_c": _number(temperature),
                    "power_w": _number(power),
                }
            )
        except ValueError as exc:
            raise ValueError(f"nvidia-smi line {number}: {exc} in {line!r}") from exc
    return samples


_NPU_ROW = re.compile(r"^(\d+)\s+(\S*[^\d\s]\S*)$")  # "0     910B3": NPU id and a name
_CHIP_ROW = re.compile(r"^(\d+)(?:\s+(\d+))?$")  # "0" or "0     2": chip and device id
_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")  # "3318 / 65536", "59356/ 65536"


def parse_npu_smi(text: str) -> list[Sample]:
    """Parse the device table of ``npu-smi info`` (Huawei Ascend): one sample per chip.

    Each chip comes as two rows: the NPU row (id, name | health | power, temperature, …)
    and the chip row (chip [device id] | bus id | AICore %, memory used / total
    [, HBM used / total]). The card index is the chip row's device id where the table has
    that column (Atlas A3, 310P), else the NPU id (910B: one chip per NPU). Memory used is the
    HBM figure where there is one. The process table below the devices is ignored.
    """
    samples: list[Sample] = []
    npu: tuple[int, float | None, float | None] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            continue
        if "Process id" in line or "Process name" in line:
            break  # the process table follows the devices
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != 3:
            continue
        first, second, values = cells
        npu_match, chip_match = _NPU_ROW.match(first), _CHIP_ROW.match(first)
        if npu_match and second and not second.startswith("Bus"):
            numbers = values.split()
            power = _number(numbers[0]) if numbers else None
            temperature = _number(numbers[1]) if len(numbers) > 1 else None
            npu = (int(npu_match.group(1)), power, temperature)
        elif chip_match and npu is not None:
            npu_id, power, temperature = npu
            pairs = _PAIR.findall(values)
            head = values.split()
            samples.append(
                {
                    "index": int(chip_match.group(2)) if chip_match.group(2) else npu_id,
                    "utilization_pct": _number(head[0]) if head else None,
                    "memory_used_mb": float(pairs[-1][0]) if pairs else None,
                    "temperature_c": temperature,
                    "power_w": power,
                }
            )
            npu = None
    return samples


_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Parse the Prometheus text exposition format into (name, labels, value).

    Comments, blank lines and malformed lines are skipped; timestamps are ignored.
    """
    series = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name_match = _NAME.match(line)
        if not name_match:
            continue
        position = name_match.end()
        labels: dict[str, str] = {}
        if line[position : position + 1] == "{":
            position += 1
            while line[position : position + 1] != "}":
                label = _LABEL.match(line, position)
                if not label:
                    break
                value = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], label.group(2))
                labels[label.group(1)] = value
                position = label.end()
            if line[position : position + 1] != "}":
                continue
            position += 1
        rest = line[position:].split()
        if not rest:
            continue
        try:
            value = float(rest[0])
        except ValueError:
            continue
        series.append((name_match.group(0), labels, value))
    return series


# DCGM field → (sample key, factor)
DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used_mb", 1.0),  # MiB
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
}
# Exporters configured with profiling counters only: the graphics engine's busy ratio.
DCGM_UTIL_FALLBACK = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def parse_dcgm(text: str) -> list[Sample]:
    """Read a DCGM exporter's /metrics page: one sample per GPU, by its ``gpu`` index and
    ``UUID`` labels. MIG-instance series (a ``GPU_I_ID`` label) are skipped: they would
    overwrite the whole device's reading.
    """
    cards: dict[tuple[int | None, str], Sample] = {}
    fallback: dict[tuple[int | None, str], float] = {}
    for name, labels, value in parse_prometheus(text):
        if name not in DCGM_FIELDS and name != DCGM_UTIL_FALLBACK:
            continue
        if labels.get("GPU_I_ID"):
            continue
        gpu = labels.get("gpu", "")
        uuid = labels.get("UUID") or labels.get("uuid") or ""
        if not gpu.isdigit() and not uuid:
            continue
        key = (int(gpu) if gpu.isdigit() else None, uuid)
        if not math.isfinite(value):
            continue
        if name == DCGM_UTIL_FALLBACK:
            fallback[key] = value * 100
            continue
        sample = cards.setdefault(key, {})
        field, factor = DCGM_FIELDS[name]
        sample[field] = value * factor
    for key, value in fallback.items():
        cards.setdefault(key, {}).setdefault("utilization_pct", value)
    samples = []
    for (index, uuid), readings in sorted(cards.items(), key=lambda item: item[0][0] or 0):
        sample: Sample = {}
        if index is not None:
            sample["index"] = index
        if uuid:
            sample["uuid"] = uuid
        sample.update(readings)
        samples.append(sample)
    return samples


# --- Sources ----------------------------------------------------------------------------------


def _nvml_read(nvml, call: Callable, *args) -> object | None:
    try:
        return call(*args)
    except nvml.NVMLError:
        return None  # "not supported" on this card: leave that reading out


def read_nvml(nvml=None) -> list[Sample] | None:
    """Read every GPU through NVML; None when pynvml is missing or finds no GPU.

    *nvml* is the ``pynvml`` module (tests pass a fake one).
    """
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None  # no driver or no library: let the command-line tools try
    try:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            return None
        samples = []
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _nvml_read(nvml, nvml.nvmlDeviceGetUUID, handle)
            rates = _nvml_read(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
            util = rates.gpu if rates is not None else None
            info = _nvml_read(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
            memory = info.used if info is not None else None  # bytes
            temperature = _nvml_read(
                nvml, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
            )
            power = _nvml_read(nvml, nvml.nvmlDeviceGetPowerUsage, handle)  # milliwatts
            sample: Sample = {"index": index}
            if uuid is not None:
                sample["uuid"] = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            sample["utilization_pct"] = float(util) if util is not None else None
            sample["memory_used_mb"] = (
                round(memory / (1024 * 1024), 1) if memory is not None else None
            )
            sample["temperature_c"] = float(temperature) if temperature is not None else None
            sample["power_w"] = round(power / 1000, 1) if power is not None else None
            samples.append(sample)
        return samples
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _run(command: list[str]) -> str:
    try:
        result = subprocess.run(  # noqa: S603 - fixed argument lists, no shell
            command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise AgentError(f"{command[0]} did not answer within {COMMAND_TIMEOUT} s") from exc
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip().splitlines()[:1]
        raise AgentError(f"{command[0]} failed ({result.returncode}): {' '.join(message)}")
    return result.stdout


def fetch_text(url: str, *, timeout: float = 5, opener=None) -> str:
    """GET *url* and return its body as text (used for DCGM exporter pages)."""
    opener = opener or urlopen
    request = Request(url, headers={"User-Agent": USER_AGENT, "Accept": "text/plain"})  # noqa: S310
    with opener(request, timeout=timeout) as response:
        return response.read().decode("utf-8", errors="replace")


def collect(source: str = "auto", *, dcgm_url: str | None = None) -> tuple[str, list[Sample]]:
    """Read the cards from the first source that works; returns (source name, samples)."""
    if dcgm_url or source == "dcgm":
        if not dcgm_url:
            raise AgentError("--source dcgm needs --dcgm URL")
        try:
            text = fetch_text(dcgm_url)
        except (URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AgentError(f"Cannot read the DCGM exporter at {dcgm_url}: {reason}") from exc
        return "dcgm", parse_dcgm(text)
    if source in ("auto", "nvml"):
        samples = read_nvml()
        if samples:
            return "nvml", samples
        if source == "nvml":
            raise AgentError("NVML is not usable: install nvidia-ml-py and the NVIDIA driver")
    if source in ("auto", "nvidia-smi") and shutil.which("nvidia-smi"):
        return "nvidia-smi", parse_nvidia_smi(_run(NVIDIA_SMI_QUERY))
    if source in ("auto", "npu-smi") and shutil.which("npu-smi"):
        return "npu-smi", parse_npu_smi(_run(["npu-smi", "info"]))
    raise AgentError(
        "No card source found: install nvidia-ml-py or nvidia-smi (NVIDIA), npu-smi "
        "(Huawei Ascend), or point --dcgm at a DCGM exporter"
    )


# --- Posting ----------------------------------------------------------------------------------


class PostError(AgentError):
    """A post that failed; *retry*: trying again may help; *fatal*: the agent cannot go on."""

    def __init__(self, message: str, *, retry: bool, fatal: bool = False):
        super().__init__(message)
        self.retry = retry
        self.fatal = fatal


def _explain(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", errors="replace")[:300]
    messages: list[str] = []

    def walk(value):
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        else:
            messages.append(str(value))

    walk(data)
    return "; ".join(messages)[:1000]


def post_samples(
    url: str,
    token: str,
    payload: dict,
    *,
    timeout: float = 10,
    opener=None,
    context: ssl.SSLContext | None = None,
) -> dict:
    """POST one batch; returns the portal's answer or raises PostError."""
    opener = opener or urlopen
    request = Request(  # noqa: S310 - the operator gives the portal's URL
        url,
        data=json.dumps(payload).encode(),
        method="POST",
        headers={
            "Authorization": f"Node {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        },
    )
    kwargs = {"timeout": timeout}
    if context is not None:
        kwargs["context"] = context
    try:
        with opener(request, **kwargs) as response:
            return json.loads(response.read() or b"{}")
    except HTTPError as exc:
        detail = _explain(exc.read() or b"")
        if exc.code in (401, 403):
            raise PostError(
                f"The portal refused the token ({exc.code}): {detail}. Issue one with "
                "`manage.py node_token HOSTNAME` and give it to the agent.",
                retry=False,
                fatal=True,
            ) from exc
        retry = exc.code == 429 or exc.code >= 500
        raise PostError(f"The portal answered {exc.code}: {detail}", retry=retry) from exc
    except (URLError, TimeoutError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PostError(f"Cannot reach {url}: {reason}", retry=True) from exc


def post_with_retries(
    url: str,
    token: str,
    payload: dict,
    *,
    retries: int = 5,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = print,
    **kwargs,
) -> dict:
    """post_samples, tried again with exponential backoff (1, 2, 4 … 60 s) on transient errors."""
    attempt = 0
    while True:
        try:
            return post_samples(url, token, payload, **kwargs)
        except PostError as exc:
            if not exc.retry or attempt >= retries:
                raise
            delay = min(2**attempt, MAX_BACKOFF)
            log(f"cardpool-agent: {exc}; trying again in {delay} s")
            sleep(delay)
            attempt += 1


# --- Checkpoints of preempted leases (local backend) ------------------------------------------

SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "CONT")


def processes_using(env_var: str, devices: list[int], *, proc: Path = Path("/proc")) -> list[int]:
    """Processes started with *env_var* naming one of *devices* (what the lease's access
    details tell the holder to export), this agent excepted. Unreadable ones are skipped."""
    wanted = {str(d) for d in devices}
    prefix = f"{env_var}=".encode()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(prefix):
                named = item[len(prefix) :].decode(errors="replace").split(",")
                if wanted & {n.strip() for n in named}:
                    found.append(int(entry.name))
                break
    return sorted(found)


def deliver_checkpoint(
    item: dict, *, proc: Path = Path("/proc"), kill=os.kill, run=subprocess.run
) -> tuple[bool, str]:
    """Send one lease's checkpoint signal and run its command; (ok, what was done)."""
    done, ok = [], True
    signal_name = str(item.get("signal") or "")
    env_var, devices = str(item.get("env_var") or ""), list(item.get("devices") or [])
    if signal_name:
        if signal_name not in SIGNALS:
            return False, f"unknown signal {signal_name}"
        pids = processes_using(env_var, devices, proc=proc) if env_var else []
        for pid in pids:
            try:
                kill(pid, getattr(signal, f"SIG{signal_name}"))
            except OSError as exc:
                ok = False
                done.append(f"pid {pid}: {exc.strerror}")
        done.append(f"SIG{signal_name} to {len(pids)} process(es)")
    if item.get("command"):
        env = {**os.environ, env_var: ",".join(str(d) for d in devices)} if env_var else None
        try:
            result = run(  # noqa: S603 - the holder's own checkpoint command
                ["/bin/sh", "-c", str(item["command"])],
                env=env,
                capture_output=True,
                timeout=int(item.get("seconds") or COMMAND_TIMEOUT),
                check=False,
            )
            ok = ok and result.returncode == 0
            done.append(f"command exited {result.returncode}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok = False
            done.append(f"command failed: {exc}")
    return ok, "; ".join(done)


def get_json(url: str, token: str, *, timeout: float = 10, opener=None, context=None):
    """GET with the node token; the portal's JSON answer, or PostError."""
    opener = opener or urlopen
    request = Request(  # noqa: S310 - the operator gives the portal's URL
        url,
        headers={"Authorization": f"Node {token}", "Accept": "application/json"},
    )
    kwargs: dict = {"timeout": timeout}
    if context is not None:
        kwargs["context"] = context
    try:
        with opener(request, **kwargs) as response:
            return json.loads(response.read() or b"[]")
    except HTTPError as exc:
        raise PostError(f"The portal answered {exc.code}", retry=exc.code >= 500) from exc
    except (URLError, TimeoutError, ConnectionError) as exc:
        raise PostError(f"Cannot reach {url}: {getattr(exc, 'reason', exc)}", retry=True) from exc


def checkpoints_url(telemetry_url: str) -> str:
    """The checkpoints endpoint beside the telemetry one."""
    base = telemetry_url.rstrip("/")
    if base.endswith("/telemetry"):
        base = base[: -len("/telemetry")]
    return f"{base}/checkpoints/"


def checkpoints_once(url: str, token: str, *, opener=None, context=None, **deliver) -> int:
    """Deliver every checkpoint due on this node and report each; returns how many."""
    due = get_json(url, token, opener=opener, context=context)
    for item in due:
        ok, detail = deliver_checkpoint(item, **deliver)
        post_samples(
            f"{url}{int(item['lease'])}/",
            token,
            {"ok": ok, "detail": detail},
            opener=opener,
            context=context,
        )
    return len(due)


# --- Command line -----------------------------------------------------------------------------


def read_token(args: argparse.Namespace, environ=os.environ) -> str:
    """--token, else $CARDPOOL_AGENT_TOKEN, else the token file."""
    token = args.token or environ.get("CARDPOOL_AGENT_TOKEN", "")
    if not token:
        path = Path(args.token_file)
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise AgentError(
                f"No token: pass --token, set CARDPOOL_AGENT_TOKEN or write it to {path} "
                f"({exc.strerror})"
            ) from exc
    if not token:
        raise AgentError("The token is empty")
    return token


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cardpool-agent",
        description="Post this node's card telemetry to a Cardpool portal.",
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("CARDPOOL_AGENT_URL", ""),
        help="the portal's telemetry endpoint, e.g. https://portal/api/v1/telemetry/ "
        "(default: $CARDPOOL_AGENT_URL)",
    )
    parser.add_argument("--token", default="", help="node token (prefer the env or file)")
    parser.add_argument(
        "--token-file",
        default=os.environ.get("CARDPOOL_AGENT_TOKEN_FILE", DEFAULT_TOKEN_FILE),
        help=f"file holding the node token (default: {DEFAULT_TOKEN_FILE})",
    )
    parser.add_argument("--node", default="", help="this node's hostname in the portal")
    parser.add_argument(
        "--source",
        choices=["auto", "nvml", "nvidia-smi", "npu-smi", "dcgm"],
        default="auto",
        help="where to read the cards (default: the first that works)",
    )
    parser.add_argument("--dcgm", metavar="URL", help="scrape this DCGM exporter instead")
    parser.add_argument(
        "--interval", type=float, default=30, help="seconds between posts (default: 30)"
    )
    parser.add_argument("--once", action="store_true", help="post once and exit")
    parser.add_argument(
        "--retries", type=int, default=5, help="tries again per post on transient errors"
    )
    parser.add_argument("--timeout", type=float, default=10, help="HTTP timeout in seconds")
    parser.add_argument("--cafile", help="CA bundle to verify the portal's certificate")
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be posted and exit"
    )
    parser.add_argument(
        "--no-checkpoints",
        action="store_true",
        help="do not deliver the checkpoints of preempted leases (local backend; "
        "--once never does)",
    )
    sessions = parser.add_argument_group("sessions and SSH keys (local backend)")
    sessions.add_argument(
        "--sessions", action="store_true", help="also run this node's sessions and SSH keys"
    )
    sessions.add_argument(
        "--no-telemetry", action="store_true", help="sessions and keys only (no cards read)"
    )
    sessions.add_argument(
        "--api", default="", help="the portal's API root (default: --url without telemetry/)"
    )
    sessions.add_argument(
        "--session-interval", type=float, default=5, help="seconds between rounds (default 5)"
    )
    sessions.add_argument(
        "--session-address",
        default=os.environ.get("CARDPOOL_AGENT_SESSION_ADDRESS", ""),
        help="address sessions listen on, reachable by the portal's proxy (default: this "
        "host's address)",
    )
    sessions.add_argument(
        "--state-dir",
        default=os.environ.get("CARDPOOL_AGENT_STATE_DIR", "/var/lib/cardpool-agent"),
        help="pid files and session logs (default /var/lib/cardpool-agent)",
    )
    return parser


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_once(args: argparse.Namespace, token: str, **kwargs) -> int:
    """Collect and post one batch; returns the number of samples the portal stored."""
    source, samples = collect(args.source, dcgm_url=args.dcgm)
    if not samples:
        raise AgentError(f"{source} reported no cards")
    at = _now()
    payload: dict = {"samples": [{**sample, "at": at} for sample in samples]}
    if args.node:
        payload["node"] = args.node
    answer = post_with_retries(
        args.url, token, payload, retries=args.retries, timeout=args.timeout, **kwargs
    )
    return int(answer.get("count", 0))


def main(argv: list[str] | None = None, *, opener=None, sleep=time.sleep) -> int:
    """Entry point of ``cardpool-agent``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.dry_run:
        try:
            source, samples = collect(args.source, dcgm_url=args.dcgm)
        except (AgentError, ValueError, OSError) as exc:
            print(f"cardpool-agent: {exc}", file=sys.stderr)
            return 1
        print(json.dumps({"source": source, "samples": samples}, indent=2))
        return 0
    if not args.url:
        parser.error("--url (or CARDPOOL_AGENT_URL) is required")
    if args.interval <= 0:
        parser.error("--interval must be positive")
    try:
        token = read_token(args)
    except AgentError as exc:
        print(f"cardpool-agent: {exc}", file=sys.stderr)
        return 2
    extra: dict = {"opener": opener, "sleep": sleep}
    if args.cafile:
        extra["context"] = ssl.create_default_context(cafile=args.cafile)
    log = lambda message: print(message, file=sys.stderr)  # noqa: E731
    if args.sessions:
        return _with_sessions(args, token, log=log, extra=extra, sleep=sleep)
    while True:
        started = time.monotonic()
        try:
            stored = run_once(args, token, log=log, **extra)
            if not (args.no_checkpoints or args.once):
                try:
                    checkpoints_once(
                        checkpoints_url(args.url),
                        token,
                        opener=opener,
                        context=extra.get("context"),
                    )
                except PostError as exc:
                    log(f"cardpool-agent: checkpoints: {exc}")
            if args.once:
                print(f"cardpool-agent: posted, {stored} new samples stored")
                return 0
        except PostError as exc:
            log(f"cardpool-agent: {exc}")
            if args.once or exc.fatal:
                return 1
        except (AgentError, ValueError, OSError) as exc:
            log(f"cardpool-agent: {exc}")
            if args.once:
                return 1
        sleep(max(0.0, args.interval - (time.monotonic() - started)))


def _with_sessions(args, token: str, *, log, extra: dict, sleep) -> int:
    """The loop with ``--sessions``: a sessions round every --session-interval seconds, and
    (unless --no-telemetry) a telemetry post every --interval seconds."""
    try:
        from inventory import agent_sessions
    except ImportError:  # copied to a node as two files side by side
        import agent_sessions  # type: ignore[no-redef]

    address = args.session_address or socket.gethostbyname(socket.gethostname())
    keeper = agent_sessions.SessionKeeper(args.state_dir, address=address, log=log)
    api = args.api or args.url.rsplit("telemetry/", 1)[0]
    next_post = 0.0
    while True:
        if not args.no_telemetry and time.monotonic() >= next_post:
            next_post = time.monotonic() + args.interval
            try:
                run_once(args, token, log=log, **extra)
            except (AgentError, ValueError, OSError) as exc:
                log(f"cardpool-agent: {exc}")
        try:
            agent_sessions.sessions_round(api, token, keeper, timeout=args.timeout)
        except (OSError, ValueError) as exc:
            log(f"cardpool-agent: sessions: {exc}")
            if args.once:
                return 1
        if args.once:
            return 0
        # The checkpoints of preempted leases, every round in this mode too (the mode the
        # demo runs): the portal says "sent" only once this loop has delivered and answered.
        if not args.no_checkpoints:
            try:
                checkpoints_once(
                    checkpoints_url(args.url),
                    token,
                    opener=extra.get("opener"),
                    context=extra.get("context"),
                )
            except PostError as exc:
                log(f"cardpool-agent: checkpoints: {exc}")
        sleep(args.session_interval)


if __name__ == "__main__":
    sys.exit(main())
