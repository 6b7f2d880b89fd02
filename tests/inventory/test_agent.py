"""cardpool-agent: the parsers on real-looking tool output, NVML through a fake pynvml, the
choice of source, and posting through a fake opener (no network, no Django)."""

from __future__ import annotations

import io
import json
import types
from pathlib import Path
from urllib.error import HTTPError, URLError

import pytest

from inventory import agent

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "telemetry"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- Parsers ---------------------------------------------------------------------------------


def test_nvidia_smi_csv_with_missing_readings():
    samples = agent.parse_nvidia_smi(fixture("nvidia-smi.csv"))
    assert [s["index"] for s in samples] == [0, 1, 2, 3]
    assert samples[0] == {
        "index": 0,
        "uuid": "GPU-5b1c2a7e-0d3f-4a51-9e6b-8c2f1d7a3e01",
        "utilization_pct": 97.0,
        "memory_used_mb": 61234.0,
        "temperature_c": 71.0,
        "power_w": 612.45,
    }
    assert samples[2]["power_w"] is None  # "[N/A]": the card cannot measure it
    assert samples[3]["utilization_pct"] is None


def test_nvidia_smi_malformed_line_names_the_line():
    with pytest.raises(ValueError, match="line 2"):
        agent.parse_nvidia_smi("0, GPU-a, 1, 2, 3, 4\nNVIDIA-SMI has failed\n")


def test_npu_smi_910b_one_chip_per_npu():
    samples = agent.parse_npu_smi(fixture("npu-smi-910b.txt"))
    assert [s["index"] for s in samples] == [0, 1, 2, 3]  # the process table is not a card
    assert samples[0] == {
        "index": 0,
        "utilization_pct": 86.0,
        "memory_used_mb": 58321.0,  # HBM, not the (empty) DDR column
        "temperature_c": 52.0,
        "power_w": 343.7,
    }
    assert samples[2]["utilization_pct"] == 3.0 and samples[2]["memory_used_mb"] == 3310.0


def test_npu_smi_310p_two_chips_per_card_take_the_device_id():
    samples = agent.parse_npu_smi(fixture("npu-smi-310p.txt"))
    assert [(s["index"], s["utilization_pct"], s["memory_used_mb"]) for s in samples] == [
        (0, 21.0, 12050.0),
        (1, 0.0, 1532.0),
    ]
    assert all(s["power_w"] is None for s in samples)  # "NA"


def test_npu_smi_without_device_column_uses_the_npu_id():
    """In a container that sees one NPU (e.g. ModelArts), the NPU id is the card's index."""
    text = (
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n"
        "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |\n"
        "| 6     910B1               | OK            | -           33                0    / 0             |\n"
        "| 0                         | 0000:01:00.0  | 0           0    / 0          3384 / 65536         |\n"
    )
    assert agent.parse_npu_smi(text) == [
        {
            "index": 6,
            "utilization_pct": 0.0,
            "memory_used_mb": 3384.0,
            "temperature_c": 33.0,
            "power_w": None,
        }
    ]


def test_prometheus_labels_with_escapes_and_timestamps():
    text = (
        "# HELP x y\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",note="a \\"quoted\\", b}"} 55 1700000000000\n'
        "garbage line\n"
        "up 1\n"
    )
    assert agent.parse_prometheus(text) == [
        ("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "UUID": "GPU-a", "note": 'a "quoted", b}'}, 55.0),
        ("up", {}, 1.0),
    ]


def test_dcgm_exporter_page():
    samples = agent.parse_dcgm(fixture("dcgm-exporter.txt"))
    assert samples == [
        {
            "index": 0,
            "uuid": "GPU-5b1c2a7e-0d3f-4a51-9e6b-8c2f1d7a3e01",
            "temperature_c": 71.0,
            "power_w": 612.457,
            "utilization_pct": 97.0,
            "memory_used_mb": 61234.0,
        },
        {
            "index": 1,
            "uuid": "GPU-9e0f4c13-7b2a-4d8e-a1c5-3f6e2b9d0a44",
            "temperature_c": 33.0,
            "power_w": 69.871,
            "utilization_pct": 0.0,
            "memory_used_mb": 0.0,
        },
    ]


def test_dcgm_profiling_only_exporter_and_mig_series():
    text = (
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a"} 0.425\n'
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a"} 1024\n'
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7"} 9\n'
        'DCGM_FI_DEV_GPU_TEMP{Hostname="x"} 40\n'  # no gpu, no UUID: cannot be placed
    )
    assert agent.parse_dcgm(text) == [
        {"index": 0, "uuid": "GPU-a", "memory_used_mb": 1024.0, "utilization_pct": 42.5}
    ]


# --- NVML through a fake pynvml --------------------------------------------------------------


class FakeNVMLError(Exception):
    pass


def fake_pynvml(cards: list[dict], *, init_error: bool = False) -> types.SimpleNamespace:
    """Just enough of pynvml's API, with the units NVML uses (bytes, milliwatts)."""
    calls: list[str] = []

    def init():
        calls.append("init")
        if init_error:
            raise FakeNVMLError("NVML Shared Library Not Found")

    def power(handle):
        if cards[handle].get("power_mw") is None:
            raise FakeNVMLError("Not Supported")
        return cards[handle]["power_mw"]

    return types.SimpleNamespace(
        calls=calls,
        NVMLError=FakeNVMLError,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: len(cards),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: cards[h]["uuid"],
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(
            gpu=cards[h]["gpu"], memory=0
        ),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=cards[h]["used"]),
        nvmlDeviceGetTemperature=lambda h, sensor: cards[h]["temp"],
        nvmlDeviceGetPowerUsage=power,
    )


def test_nvml_readings_in_portal_units():
    nvml = fake_pynvml(
        [
            {"uuid": "GPU-a", "gpu": 88, "used": 40 * 1024**3, "temp": 64, "power_mw": 301250},
            # older nvidia-ml-py returns bytes; some cards cannot report power
            {"uuid": b"GPU-b", "gpu": 0, "used": 512 * 1024**2, "temp": 30, "power_mw": None},
        ]
    )
    assert agent.read_nvml(nvml) == [
        {
            "index": 0,
            "uuid": "GPU-a",
            "utilization_pct": 88.0,
            "memory_used_mb": 40960.0,
            "temperature_c": 64.0,
            "power_w": 301.2,
        },
        {
            "index": 1,
            "uuid": "GPU-b",
            "utilization_pct": 0.0,
            "memory_used_mb": 512.0,
            "temperature_c": 30.0,
            "power_w": None,
        },
    ]
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_without_driver_or_gpus_gives_way():
    assert agent.read_nvml(fake_pynvml([], init_error=True)) is None
    no_gpus = fake_pynvml([])
    assert agent.read_nvml(no_gpus) is None
    assert no_gpus.calls == ["init", "shutdown"]


def test_sources_in_order(monkeypatch):
    """NVML first; without it nvidia-smi; without that npu-smi; else a clear error."""
    monkeypatch.setattr(agent, "read_nvml", lambda: None)
    tools = {"nvidia-smi", "npu-smi"}
    monkeypatch.setattr(agent.shutil, "which", lambda name: name if name in tools else None)
    outputs = {
        "nvidia-smi": fixture("nvidia-smi.csv"),
        "npu-smi": fixture("npu-smi-910b.txt"),
    }
    monkeypatch.setattr(agent, "_run", lambda command: outputs[command[0]])
    assert agent.collect()[0] == "nvidia-smi"
    tools.discard("nvidia-smi")
    source, samples = agent.collect()
    assert source == "npu-smi" and len(samples) == 4
    tools.clear()
    with pytest.raises(agent.AgentError, match="No card source found"):
        agent.collect()
    monkeypatch.setattr(agent, "read_nvml", lambda: [{"index": 0, "utilization_pct": 1.0}])
    assert agent.collect()[0] == "nvml"


# --- Posting ---------------------------------------------------------------------------------


class FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FakeOpener:
    """Answers each call with the next scripted outcome: a dict (200 JSON), an HTTP status,
    or an exception to raise."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.requests = []

    def __call__(self, request, timeout=None, **kwargs):
        self.requests.append(request)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        if isinstance(outcome, int):
            body = io.BytesIO(json.dumps({"samples": ["samples[0]: bad"]}).encode())
            raise HTTPError(request.full_url, outcome, "error", {}, body)
        return FakeResponse(json.dumps(outcome).encode())


URL = "https://portal.example/api/v1/telemetry/"
PAYLOAD = {"samples": [{"index": 0, "utilization_pct": 3.0}]}


def test_post_sends_node_token_and_json():
    opener = FakeOpener({"count": 1, "received": 1})
    assert agent.post_samples(URL, "cpn_x", PAYLOAD, opener=opener) == {"count": 1, "received": 1}
    request = opener.requests[0]
    assert request.get_method() == "POST"
    assert request.get_header("Authorization") == "Node cpn_x"
    assert request.get_header("Content-type") == "application/json"
    assert json.loads(request.data) == PAYLOAD


def test_transient_errors_are_retried_with_backoff():
    opener = FakeOpener(URLError("Connection refused"), 503, 429, {"count": 1})
    slept, logged = [], []
    answer = agent.post_with_retries(
        URL, "t", PAYLOAD, opener=opener, sleep=slept.append, log=logged.append
    )
    assert answer == {"count": 1}
    assert slept == [1, 2, 4]
    assert "Connection refused" in logged[0] and "503" in logged[1]


def test_bad_input_is_not_retried_and_says_why():
    opener = FakeOpener(400)
    with pytest.raises(agent.PostError, match="400: samples\\[0\\]: bad") as caught:
        agent.post_with_retries(URL, "t", PAYLOAD, opener=opener, sleep=lambda s: None)
    assert not caught.value.retry and len(opener.requests) == 1


def test_retries_give_up_after_the_limit():
    opener = FakeOpener(*[500] * 3)
    with pytest.raises(agent.PostError, match="500"):
        agent.post_with_retries(URL, "t", PAYLOAD, opener=opener, retries=2, sleep=lambda s: None)
    assert len(opener.requests) == 3


# --- Command line ----------------------------------------------------------------------------


@pytest.fixture
def two_cards(monkeypatch):
    samples = [{"index": 0, "utilization_pct": 5.0}, {"index": 1, "utilization_pct": 0.0}]
    monkeypatch.setattr(agent, "collect", lambda source, dcgm_url=None: ("nvml", samples))


def test_once_posts_one_batch(two_cards, capsys, monkeypatch):
    monkeypatch.delenv("CARDPOOL_AGENT_TOKEN", raising=False)
    opener = FakeOpener({"count": 2, "received": 2})
    code = agent.main(
        ["--url", URL, "--token", "cpn_t", "--node", "gpu-a01", "--once"], opener=opener
    )
    assert code == 0
    body = json.loads(opener.requests[0].data)
    assert body["node"] == "gpu-a01" and len(body["samples"]) == 2
    assert all(sample["at"].endswith("+00:00") for sample in body["samples"])
    assert "2 new samples" in capsys.readouterr().out


def test_token_from_env_then_file(two_cards, tmp_path, monkeypatch):
    token_file = tmp_path / "token"
    token_file.write_text("cpn_from_file\n")
    monkeypatch.delenv("CARDPOOL_AGENT_TOKEN", raising=False)
    opener = FakeOpener({"count": 2}, {"count": 2})
    args = ["--url", URL, "--token-file", str(token_file), "--once"]
    assert agent.main(args, opener=opener) == 0
    monkeypatch.setenv("CARDPOOL_AGENT_TOKEN", "cpn_from_env")
    assert agent.main(args, opener=opener) == 0
    headers = [request.get_header("Authorization") for request in opener.requests]
    assert headers == ["Node cpn_from_file", "Node cpn_from_env"]


def test_missing_token_is_a_clear_error(two_cards, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CARDPOOL_AGENT_TOKEN", raising=False)
    args = ["--url", URL, "--token-file", str(tmp_path / "none"), "--once"]
    assert agent.main(args, opener=FakeOpener()) == 2
    assert "No token: pass --token" in capsys.readouterr().err


def test_refused_token_stops_the_loop(two_cards, capsys):
    """A wrong token will not heal by itself: the agent exits (systemd shows why)."""
    opener = FakeOpener(401)
    code = agent.main(["--url", URL, "--token", "bad", "--interval", "1"], opener=opener)
    assert code == 1
    assert "refused the token" in capsys.readouterr().err


def test_loop_keeps_going_after_a_bad_batch(two_cards, capsys):
    class Stop(Exception):
        pass

    naps = []

    def sleep(seconds):
        naps.append(seconds)
        if len(naps) == 2:
            raise Stop

    opener = FakeOpener(400, {"count": 2})
    with pytest.raises(Stop):
        agent.main(
            ["--url", URL, "--token", "t", "--interval", "30", "--no-checkpoints"],
            opener=opener,
            sleep=sleep,
        )
    assert len(opener.requests) == 2  # the 400 was reported, and the next round posted again
    assert "400" in capsys.readouterr().err


def test_dry_run_prints_without_posting(two_cards, capsys):
    assert agent.main(["--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "nvml"
