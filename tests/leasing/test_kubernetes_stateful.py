"""Any sequence of hand-over, repeated hand-over, change of cards and release leaves the
cluster holding exactly what the last call asked for (Hypothesis, against the API stand-in):
one running pod per node of the holding with its count, nothing left after a release, the
exec access following the pods. Idempotence on the lease id is what makes this hold when a
task runs a call twice."""

from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasing.backends import Holding, NodeCards
from leasing.backends.kubernetes import KubernetesBackend

NODES = ("gpu01", "gpu02")
holdings = st.dictionaries(st.sampled_from(NODES), st.integers(1, 4), min_size=1, max_size=2)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("provision"), holdings),
        st.tuples(st.just("change"), holdings),
        st.tuples(st.just("again"), st.none()),
        st.tuples(st.just("release"), st.none()),
    ),
    min_size=1,
    max_size=5,
)


def holding(counts: dict[str, int]) -> Holding:
    return Holding(
        lease_id=42,
        username="alice",
        slurm_user="alice",
        status="active",
        card_model_slug="a100-test",
        devices_env="CUDA_VISIBLE_DEVICES",
        end_at=datetime(2100, 1, 1, tzinfo=UTC),
        nodes=tuple(NodeCards(h, tuple(range(n))) for h, n in sorted(counts.items())),
        backend="kubernetes",
        team="vision",
        priority="normal",
        vendor="nvidia",
    )


@settings(
    max_examples=12,
    deadline=timedelta(seconds=30),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=steps)
def test_the_cluster_holds_what_the_last_call_asked_for(kube, settings, steps):
    settings.CARDPOOL_KUBERNETES = {**settings.CARDPOOL_KUBERNETES, "WAIT_SECONDS": 1}
    for host in NODES:
        if kube.get("nodes", "", host) is None:
            kube.add_node(host, resources={"nvidia.com/gpu": 4})
    backend = KubernetesBackend()
    backend.release(holding({"gpu01": 1}))  # a clean start for this example
    wanted: dict[str, int] | None = None
    for op, counts in steps:
        if op == "provision" or (op == "change" and wanted is None):
            backend.provision(holding(counts))
            wanted = counts
        elif op == "change":
            backend.change(holding(counts))
            wanted = counts
        elif op == "again" and wanted is not None:
            backend.provision(holding(wanted))
        elif op == "release":
            backend.release(holding(wanted or {"gpu01": 1}))
            wanted = None
        pods = kube.pods_of(42)
        held = {
            p["spec"]["nodeName"]: int(
                p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
            )
            for p in pods
        }
        assert len(pods) == len(held)  # one pod per node
        assert held == (wanted or {})
        assert all(p["status"]["phase"] == "Running" for p in pods)
        role = kube.get("roles", "cardpool-vision", "lease-42-exec")
        if wanted is None:
            assert role is None
        else:
            names = sorted(p["metadata"]["name"] for p in pods)
            assert role["rules"][0]["resourceNames"] == names
