"""manage.py import_inventory: generic CSV, YAML and the real Alibaba PAI machine list."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db.models import Count
from django.utils import timezone

from inventory.models import Card, Node, Region
from leasing.choices import LeaseStatus
from leasing.models import Allocation, Lease
from tests.factories import CardModelFactory, RegionFactory, TeamFactory, UserFactory

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "inventory"
PAI_FILE = Path(settings.BASE_DIR).parent / "shared/data/inventory/alibaba-pai-machines.csv"
PAI_MAP = ["--map", "MISC=misc"]


def run(*args: str) -> str:
    out = StringIO()
    call_command("import_inventory", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def pai_file() -> Path:
    if not PAI_FILE.exists():
        pytest.skip(f"real data not found at {PAI_FILE} (../shared/data beside the repo root)")
    return PAI_FILE


@pytest.fixture
def pai_models(db):
    return {
        slug: CardModelFactory(slug=slug) for slug in ("p100", "t4", "v100-16g", "v100-32g", "misc")
    }


@pytest.fixture
def models(db):
    return {slug: CardModelFactory(slug=slug) for slug in ("a100-80g-sxm", "t4", "ascend-910b")}


def snapshot() -> tuple[list, list]:
    nodes = list(Node.objects.order_by("pk").values_list("pk", "hostname", "updated_at", "labels"))
    cards = list(
        Card.objects.order_by("pk").values_list(
            "pk", "node_id", "index", "uuid", "card_model_id", "interconnect_domain"
        )
    )
    return nodes, cards


# --- Alibaba PAI -----------------------------------------------------------------------


def test_alibaba_file_gives_6742_cards_on_1814_gpu_nodes(pai_file, pai_models):
    out = run(str(pai_file), *PAI_MAP, "--region", "pai", "--skip-type", "CPU")

    assert Node.objects.count() == 1814
    assert Card.objects.count() == 6742
    per_model = dict(Card.objects.values_list("card_model__slug").annotate(n=Count("pk")))
    assert per_model == {"p100": 1596, "t4": 994, "v100-16g": 832, "v100-32g": 1080, "misc": 2240}
    assert Region.objects.filter(slug="pai").exists()
    assert "Created region 'pai'" in out
    assert "1814 created" in out and "6742 created" in out and "83 row(s) skipped" in out
    node = Node.objects.get(hostname="f50778ef4a069ef07dcbf829")  # a V100 machine, 8 cards
    assert node.external_id == node.hostname
    assert node.labels == {"gpu_type": "V100"}
    assert (node.cpu_cores, node.memory_gb) == (96, 384)
    assert list(node.cards.values_list("uuid", flat=True))[:2] == [
        f"{node.hostname}-gpu0",
        f"{node.hostname}-gpu1",
    ]


def test_alibaba_reimport_changes_nothing(pai_file, pai_models):
    run(str(pai_file), "--mapping", str(FIXTURES / "pai-mapping.yaml"), "--region", "pai")
    before = snapshot()

    out = run(
        str(pai_file),
        "--format",
        "alibaba",
        "--mapping",
        str(FIXTURES / "pai-mapping.yaml"),
        "--region",
        "pai",
    )

    assert "nodes: 0 created, 0 updated, 1814 unchanged" in out
    assert "cards: 0 created, 0 updated, 0 removed" in out
    assert snapshot() == before


def test_alibaba_unmapped_type_names_every_line_and_imports_nothing(pai_file, pai_models):
    with pytest.raises(CommandError) as excinfo:
        run(str(pai_file), "--region", "pai")  # MISC has no default mapping

    message = str(excinfo.value)
    assert "lines (280) 582-861: GPU type 'MISC' is not mapped" in message
    assert "GPU type 'MISC' is not mapped" in message
    assert Node.objects.count() == 0 and Card.objects.count() == 0
    assert not Region.objects.filter(slug="pai").exists()


def test_alibaba_import_is_fast(pai_file, pai_models, django_assert_max_num_queries):
    with django_assert_max_num_queries(120):
        run(str(pai_file), *PAI_MAP, "--region", "pai")
    with django_assert_max_num_queries(20):
        run(str(pai_file), *PAI_MAP, "--region", "pai")


# --- Generic CSV and YAML ---------------------------------------------------------------


def test_generic_csv_splits_interconnect_domains(models):
    out = run(str(FIXTURES / "nodes.csv"), "--region", "edge-1")

    a01 = Node.objects.get(hostname="gpu-a01")
    domains = list(a01.cards.values_list("index", "interconnect_domain"))
    assert domains == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 1), (7, 1)]
    assert set(
        Node.objects.get(hostname="gpu-a02").cards.values_list("interconnect_domain", flat=True)
    ) == {0}
    assert list(
        Node.objects.get(hostname="gpu-t01").cards.values_list("interconnect_domain", flat=True)
    ) == [0, 1, 2, 3]
    assert a01.region.slug == "bj-centre"
    assert (a01.network_kind, a01.network_gbps, a01.cpu_cores, a01.memory_gb) == (
        "ib",
        200,
        128,
        1024,
    )
    assert a01.driver_version == "550.54.15"
    assert a01.labels == {"rack": "r1", "row": "a"}
    assert Node.objects.get(hostname="gpu-t01").region.slug == "edge-1"
    cpu = Node.objects.get(hostname="cpu-01")
    assert cpu.cards.count() == 0 and (cpu.cpu_cores, cpu.memory_gb) == (96, 512)
    assert "nodes: 4 created" in out and "cards: 20 created" in out


def test_yaml_import(models):
    run(str(FIXTURES / "nodes.yaml"))

    ascend = Node.objects.get(hostname="ascend-01")
    assert ascend.region.slug == "sz-edge"
    assert ascend.labels == {"rack": "r3", "owner": "nlp"}
    assert ascend.software_versions == {"cann": "8.0.RC2"}
    assert ascend.driver_version == "24.1.rc2"
    assert list(ascend.cards.values_list("interconnect_domain", flat=True)) == [
        0,
        0,
        0,
        0,
        1,
        1,
        1,
        1,
    ]
    mixed = list(
        Card.objects.filter(node__hostname="mixed-01").values_list(
            "index", "uuid", "card_model__slug", "interconnect_domain"
        )
    )
    assert mixed == [
        (0, "GPU-0f3a9c1e-aaaa", "t4", 0),
        (1, "GPU-0f3a9c1e-bbbb", "t4", 0),
        (2, "GPU-0f3a9c1e-cccc", "a100-80g-sxm", 1),
    ]
    out = run(str(FIXTURES / "nodes.yaml"))
    assert "nodes: 0 created, 0 updated, 2 unchanged" in out


def test_bad_rows_are_all_reported_and_nothing_is_imported(models):
    with pytest.raises(CommandError) as excinfo:
        run(str(FIXTURES / "bad-nodes.csv"))

    message = str(excinfo.value)
    assert "line 3: card model 'no-such-model' does not exist" in message
    assert "line 4: cards must be a whole number, not 'eight'" in message
    assert "line 5: cards must not be negative, not -2" in message
    assert "line 6: duplicate hostname 'gpu-ok-01' (first on line 2)" in message
    assert "nothing imported" in message
    assert Node.objects.count() == 0 and Card.objects.count() == 0
    assert not Region.objects.exists()


def test_missing_required_column_is_reported_on_line_1(models, tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_text("hostname,region,cards\ngpu-01,bj,8\n")

    with pytest.raises(CommandError, match=r"line 1: missing required column\(s\): card_model"):
        run(str(path))
    assert Node.objects.count() == 0


def test_dry_run_writes_nothing(models):
    out = run(str(FIXTURES / "nodes.csv"), "--region", "edge-1", "--dry-run")

    assert "Dry run, nothing written" in out
    assert "Would create region 'edge-1'" in out
    assert "nodes: 4 created" in out and "cards: 20 created" in out
    assert not Node.objects.exists() and not Card.objects.exists() and not Region.objects.exists()


# --- Updates ----------------------------------------------------------------------------


def write_csv(path: Path, *rows: str) -> str:
    path.write_text("hostname,region,card_model,cards,cpu_cores\n" + "\n".join(rows) + "\n")
    return str(path)


def test_changed_row_updates_node_and_adds_cards(models, tmp_path):
    RegionFactory(slug="bj")
    run(write_csv(tmp_path / "v1.csv", "gpu-01,bj,a100-80g-sxm,4,64", "gpu-02,bj,t4,2,32"))
    node = Node.objects.get(hostname="gpu-01")
    node.labels = {"reserved-for": "nlp"}  # set by an operator; an import keeps it
    node.save()
    stamp = Node.objects.get(hostname="gpu-02").updated_at

    out = run(write_csv(tmp_path / "v2.csv", "gpu-01,bj,a100-80g-sxm,8,128", "gpu-02,bj,t4,2,32"))

    assert "nodes: 0 created, 1 updated, 1 unchanged; cards: 4 created, 0 updated, 0 removed" in out
    node.refresh_from_db()
    assert node.cpu_cores == 128 and node.labels == {"reserved-for": "nlp"}
    assert list(node.cards.values_list("index", flat=True)) == list(range(8))
    assert Node.objects.get(hostname="gpu-02").updated_at == stamp


def test_shrinking_keeps_cards_with_allocations(models, tmp_path):
    RegionFactory(slug="bj")
    run(write_csv(tmp_path / "v1.csv", "gpu-01,bj,a100-80g-sxm,4,64"))
    held = Card.objects.get(node__hostname="gpu-01", index=3)
    now = timezone.now()
    lease = Lease.objects.create(
        user=UserFactory(),
        team=TeamFactory(),
        card_model=models["a100-80g-sxm"],
        count=1,
        duration=timedelta(hours=1),
        start_at=now,
        end_at=now + timedelta(hours=1),
        status=LeaseStatus.ACTIVE,
        submitted_at=now,
    )
    Allocation.objects.create(card=held, lease=lease, start_at=lease.start_at, end_at=lease.end_at)

    out = run(write_csv(tmp_path / "v2.csv", "gpu-01,bj,a100-80g-sxm,2,64"))

    assert "cards: 0 created, 0 updated, 1 removed" in out
    assert "gpu-01: card(s) #3 are no longer in the file but have allocations" in out
    assert list(Card.objects.filter(node__hostname="gpu-01").values_list("index", flat=True)) == [
        0,
        1,
        3,
    ]


def test_uuid_taken_by_another_card_is_an_error(models, tmp_path):
    RegionFactory(slug="bj")
    run(write_csv(tmp_path / "v1.csv", "gpu-01,bj,a100-80g-sxm,1,64"))
    path = tmp_path / "nodes.yaml"
    path.write_text(
        "- hostname: gpu-02\n  region: bj\n  card_model: t4\n  cards:\n    - {index: 0, uuid: gpu-01-gpu0}\n"
    )

    with pytest.raises(
        CommandError, match=r"line 1: card UUID 'gpu-01-gpu0' already belongs to gpu-01#0"
    ):
        run(str(path))
    assert not Node.objects.filter(hostname="gpu-02").exists()


def test_changed_domains_and_model_update_cards(models, tmp_path):
    run(str(FIXTURES / "nodes.csv"), "--region", "edge-1")
    text = (FIXTURES / "nodes.csv").read_text()
    changed = text.replace(
        "gpu-a02,bj-centre,a100-80g-sxm,8,,", "gpu-a02,bj-centre,a100-80g-sxm,8,4,"
    )
    changed = changed.replace("gpu-t01,,t4,4,4,", "gpu-t01,sz-edge,ascend-910b,4,4,")
    path = tmp_path / "nodes.csv"
    path.write_text(changed)

    out = run(str(path), "--region", "edge-1")

    assert (
        "nodes: 0 created, 2 updated, 2 unchanged; cards: 0 created, 10 updated, 0 removed" in out
    )
    assert "Created region 'sz-edge'" in out
    a02 = Node.objects.get(hostname="gpu-a02")
    assert list(a02.cards.values_list("interconnect_domain", flat=True)) == [0, 0, 1, 1, 2, 2, 3, 3]
    t01 = Node.objects.get(hostname="gpu-t01")
    assert t01.region.slug == "sz-edge"
    assert set(t01.cards.values_list("card_model__slug", flat=True)) == {"ascend-910b"}


@pytest.mark.postgres
def test_an_import_refreshes_the_planner_statistics(models):
    """Right after a bulk write PostgreSQL would plan placement for one card per model."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        run(str(FIXTURES / "nodes.csv"), "--region", "edge-1")
    assert any(q["sql"].startswith("ANALYZE inventory_node") for q in queries.captured_queries)
    with CaptureQueriesContext(connection) as queries:
        run(str(FIXTURES / "nodes.csv"), "--region", "edge-1", "--dry-run")
    assert not any(q["sql"].startswith("ANALYZE") for q in queries.captured_queries)
