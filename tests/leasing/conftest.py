from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine

from tests.factories import CardModelFactory, make_node

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=ZoneInfo("Asia/Shanghai"))


@pytest.fixture(autouse=True)
def english():
    """Assertions read English messages; the Chinese ones are checked on the pages."""
    from django.utils import translation

    with translation.override("en"):
        yield


@pytest.fixture
def frozen():
    """The clock stands still at T0 unless a test moves it (traveller.shift / move_to)."""
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def a100(db):
    return CardModelFactory(slug="a100-test", name="A100 test")


@pytest.fixture
def small_pool(a100):
    """Two nodes of four A100 each, two NVLink islands of two per node."""
    return [make_node(a100, cards=4, domains=2, hostname=f"gpu{i}") for i in range(2)]


def hours(n: float) -> timedelta:
    return timedelta(hours=n)


def ask(user, team, model, count=1, duration=None, **kw):
    """Request cards through the service, two hours unless told otherwise."""
    from leasing.lifecycle import requests as lease_requests

    duration = duration if duration is not None else hours(2)
    return lease_requests.lease_request(
        user=user, team=team, card_model=model, count=count, duration=duration, **kw
    )


# --- the Kubernetes API stand-in (tests/leasing/kube_fake.py) ---------------------------


@pytest.fixture
def kube(tmp_path, settings, monkeypatch):
    """A stateful fake API server on a free port; the kubernetes backend reaches it through a
    kubeconfig, over HTTP, with the official client. Fails the test if the backend sent any
    object the Kubernetes schema refuses."""
    import yaml

    pytest.importorskip("kubernetes", reason="the kubernetes client (pip install '.[test]')")
    pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (pip install '.[test]')")
    from leasing.backends import kubernetes as kube_backend
    from tests.leasing.kube_fake import FakeKubernetes

    fake = FakeKubernetes()
    url = fake.serve()
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(fake.kubeconfig(url)))
    settings.CARDPOOL_KUBERNETES = {
        **getattr(settings, "CARDPOOL_KUBERNETES", {}),
        "KUBECONFIG": str(path),
        "WAIT_SECONDS": 2,
        "SCHEDULE_SECONDS": 120,
        "REQUEST_TIMEOUT": 5,
    }
    # The holder's uid/gid, as the site's user directory would answer.
    monkeypatch.setattr(kube_backend, "unix_ids", lambda name: (1000 + len(name), 1000))
    yield fake
    fake.close()
    assert fake.invalid == [], f"manifests the Kubernetes schema refuses: {fake.invalid}"


@pytest.fixture
def kube_node(kube, a100, settings):
    """Node gpu01 with four cards of a100-test, labelled for the kubernetes backend, and its
    Kubernetes twin advertising four nvidia.com/gpu."""
    settings.CARDPOOL = {**settings.CARDPOOL, "BACKEND": "kubernetes"}
    kube.add_node("gpu01", resources={"nvidia.com/gpu": 4})
    return make_node(a100, cards=4, hostname="gpu01", labels={"backend": "kubernetes"})
