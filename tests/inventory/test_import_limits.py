"""import_inventory refuses what the models cannot store, by line, and bounds what it reads."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone
from django.utils.html import escape

from inventory.models import Card, Node
from leasing.choices import LeaseStatus
from leasing.models import Allocation, Lease
from tests.factories import CardModelFactory, RegionFactory, UserFactory, make_node

HEADER = "hostname,region,card_model,cards,cpu_cores,driver_version,external_id\n"


def run(*args: str) -> str:
    out = StringIO()
    call_command("import_inventory", *args, stdout=out)
    return out.getvalue()


def refused(*args: str) -> str:
    """The import's error report; the test fails if the import went through."""
    with pytest.raises(CommandError) as excinfo:
        run(*args)
    assert not Node.objects.exists() and not Card.objects.exists()
    return str(excinfo.value)


@pytest.fixture
def t4(db):
    return CardModelFactory(slug="t4")


def csv_file(tmp_path: Path, *rows: str) -> str:
    path = tmp_path / "nodes.csv"
    path.write_text(HEADER + "".join(row + "\n" for row in rows), encoding="utf-8")
    return str(path)


def yaml_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "nodes.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- Hostnames ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hostname",
    ["../../x y/<b>", "a/b", "gpu 01", "-gpu", "gpu-.example", "gpu..example", "x" * 64, "é1"],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_hostname_that_is_not_one_is_refused_with_its_line(t4, tmp_path, hostname, dry_run):
    path = csv_file(tmp_path, "gpu-01,bj,t4,1,,,", f'"{hostname}",bj,t4,1,,,')

    message = refused(path, *(["--dry-run"] if dry_run else []))

    assert "line 3: hostname" in message
    assert "not a valid hostname" in message


def test_the_model_refuses_a_bad_hostname_too(db):
    node = Node(hostname="../../x y/<b>", region=RegionFactory())
    with pytest.raises(ValidationError) as excinfo:
        node.full_clean()
    assert "hostname" in excinfo.value.message_dict


def test_the_admin_form_refuses_a_bad_hostname(rf, db):
    request = rf.get("/admin/inventory/node/add/")
    request.user = UserFactory(is_staff=True, is_superuser=True)
    form_class = admin.site._registry[Node].get_form(request)
    data = {"region": RegionFactory().pk, "status": "active", "network_kind": "ethernet"}

    assert form_class(data={**data, "hostname": "gpu-01"}).is_valid()
    form = form_class(data={**data, "hostname": "../../x y/<b>"})
    assert not form.is_valid() and "hostname" in form.errors


def test_good_hostnames_pass(db):
    for hostname in ["gpu-01", "GPU-01.bj.example.org", "f50778ef4a069ef07dcbf829", "node_7"]:
        Node(hostname=hostname, region=RegionFactory()).full_clean()


@pytest.mark.parametrize("hostname", ["a/b", "../../x y/<b>"])
def test_pages_survive_a_bad_hostname_stored_before(client, alice, vision, hostname):
    """Nodes stored before the validator (or by raw SQL) are listed without a link, not a 500."""
    model = CardModelFactory(slug="t4")
    bad = make_node(model, cards=1, hostname=hostname)
    make_node(model, cards=1, hostname="gpu-ok")
    now = timezone.now()
    lease = Lease.objects.create(
        user=alice,
        team=vision,
        card_model=model,
        count=1,
        duration=timedelta(hours=1),
        start_at=now,
        end_at=now + timedelta(hours=1),
        status=LeaseStatus.ACTIVE,
        submitted_at=now,
    )
    Allocation.objects.create(
        card=bad.cards.get(), lease=lease, start_at=lease.start_at, end_at=lease.end_at
    )
    client.force_login(alice)

    for url in ["/inventory/nodes/", "/inventory/models/t4/", f"/leases/{lease.pk}/"]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert escape(hostname) in response.content.decode()
    assert client.get("/inventory/nodes/gpu-ok/").status_code == 200


# --- Every field as the model stores it ---------------------------------------------------


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (f"{'h' * 63}.{'h' * 63}.{'h' * 63}.{'h' * 63},bj,t4,0,,,", "hostname"),
        (f"gpu-02,{'r' * 61},t4,1,,,", "region"),
        ("gpu-02,bj,t4,1,2147483648,,", "cpu_cores"),
        ("gpu-02,bj,t4,1,99999999999999999999999,,", "cpu_cores"),
        (f"gpu-02,bj,t4,1,,{'1' * 61},", "driver_version"),
        (f"gpu-02,bj,t4,1,,,{'e' * 121}", "external_id"),
        ("gpu-02,bj,t4,1,,550\x00,", "driver_version"),
        ("gpu-02,bj,t4\x00,1,,,", "card_model"),
        # the card UUIDs derived from it (HOSTNAME-gpuINDEX) would be longer than 80
        (f"{'h' * 60}.{'h' * 17},bj,t4,1,,,", "card UUID"),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_value_the_model_cannot_store_is_refused_with_its_line(
    t4, tmp_path, row, expected, dry_run
):
    path = csv_file(tmp_path, "gpu-01,bj,t4,1,,,", row)

    message = refused(path, *(["--dry-run"] if dry_run else []))

    assert f"line 3: {expected}" in message
    assert "nothing imported" in message


@pytest.mark.parametrize(
    ("card", "expected"),
    [
        ("{index: 40000}", "index"),
        ("{index: 0, domain: 70000}", "domain"),
        (f"{{index: 0, uuid: {'u' * 81}}}", "uuid"),
        ("{index: 0, uuid: [a, b]}", "uuid"),
    ],
)
def test_a_card_the_model_cannot_store_is_refused_with_its_line(t4, tmp_path, card, expected):
    path = yaml_file(
        tmp_path,
        f"- hostname: gpu-01\n  region: bj\n  card_model: t4\n  cards:\n    - {card}\n",
    )

    message = refused(path)

    assert "line 1: cards[0] (line 5)" in message
    assert expected in message


@pytest.mark.parametrize(
    "entry",
    [
        "driver_version: [5, 5, 0]",
        "driver_version: {a: 1}",
        "labels: {rack: [1, 2]}",
        'labels: {"r\\0ack": r1}',
    ],
)
def test_yaml_values_must_be_single_values(t4, tmp_path, entry):
    path = yaml_file(
        tmp_path, f"- hostname: gpu-01\n  region: bj\n  card_model: t4\n  cards: 1\n  {entry}\n"
    )

    assert "line 1: " in refused(path)


def test_fields_beyond_the_header_are_still_ignored(t4, tmp_path):
    run(csv_file(tmp_path, "gpu-01,bj,t4,1,,,,extra,more"))

    assert Node.objects.filter(hostname="gpu-01").exists()


# --- Bounds -------------------------------------------------------------------------------


@pytest.mark.parametrize("cards", ["129", "50000000"])
def test_cards_per_node_are_bounded(t4, tmp_path, cards):
    message = refused(csv_file(tmp_path, f"gpu-01,bj,t4,{cards},,,"))

    assert (
        f"line 2: cards must be at most 128 (CARDPOOL_IMPORT_MAX_CARDS_PER_NODE), not {cards}"
        in (message)
    )


def test_an_alibaba_machine_card_count_is_bounded_too(t4, tmp_path):
    path = tmp_path / "machines.csv"
    path.write_text("machine,gpu_type,cap_cpu,cap_mem,cap_gpu\nm1,T4,96,512,50000000\n")

    assert "line 2: cap_gpu must be at most 128" in refused(str(path), "--region", "pai")


def test_a_listed_card_count_is_bounded_too(t4, tmp_path):
    cards = "".join(f"    - {{index: {i}}}\n" for i in range(129))
    path = yaml_file(
        tmp_path, f"- hostname: gpu-01\n  region: bj\n  card_model: t4\n  cards:\n{cards}"
    )

    assert "line 1: cards must be at most 128" in refused(path)


def test_the_card_limit_is_a_setting(t4, tmp_path):
    with override_settings(
        CARDPOOL_IMPORT={**django_settings.CARDPOOL_IMPORT, "MAX_CARDS_PER_NODE": 4}
    ):
        assert "cards must be at most 4" in refused(csv_file(tmp_path, "gpu-01,bj,t4,5,,,"))


def test_rows_are_bounded(t4, tmp_path):
    path = csv_file(tmp_path, *(f"gpu-{i:02d},bj,t4,1,,," for i in range(4)))

    with override_settings(CARDPOOL_IMPORT={**django_settings.CARDPOOL_IMPORT, "MAX_ROWS": 3}):
        assert "more than 3 rows (CARDPOOL_IMPORT_MAX_ROWS)" in refused(path)


def test_yaml_rows_are_bounded_before_they_are_built(t4, tmp_path):
    entries = "".join(
        f"- {{hostname: gpu-{i}, region: bj, card_model: t4, cards: 1}}\n" for i in range(4)
    )

    with override_settings(CARDPOOL_IMPORT={**django_settings.CARDPOOL_IMPORT, "MAX_ROWS": 3}):
        assert "more than 3 rows (CARDPOOL_IMPORT_MAX_ROWS)" in refused(
            yaml_file(tmp_path, entries)
        )


def test_file_size_is_bounded(t4, tmp_path):
    path = csv_file(tmp_path, *(f"gpu-{i:02d},bj,t4,1,,," for i in range(10)))

    with override_settings(CARDPOOL_IMPORT={**django_settings.CARDPOOL_IMPORT, "MAX_BYTES": 100}):
        assert "larger than 100 bytes (CARDPOOL_IMPORT_MAX_BYTES)" in refused(path)


def test_a_huge_csv_field_is_reported_by_line(t4, tmp_path):
    path = csv_file(tmp_path, "gpu-01,bj,t4,1,,,", f"gpu-02,bj,t4,1,,,{'x' * 200_000}")

    assert "line 3:" in refused(path)


def _laughs(level: int) -> str:
    previous = "a" if level == 1 else f"l{level - 1}"
    return f"  l{level}: &l{level} [{', '.join([f'*{previous}'] * 9)}]"


# 9 levels of 9 aliases: 9**9 (387 million) strings once expanded, from under 1 KB of YAML.
BILLION_LAUGHS = "\n".join(
    ["- hostname: &a lol", "  region: bj", "  card_model: t4", "  cards: 1"]
    + [_laughs(level) for level in range(1, 10)]
    + ["  driver_version: *l9", ""]
)


def test_yaml_aliases_are_refused_so_a_billion_laughs_cannot_expand(t4, tmp_path):
    assert len(BILLION_LAUGHS) < 1024
    message = refused(yaml_file(tmp_path, BILLION_LAUGHS))

    assert "line 5: YAML aliases (*name) are not allowed" in message


def test_deeply_nested_yaml_is_a_clear_error(t4, tmp_path):
    path = yaml_file(tmp_path, "- hostname: " + "[" * 20_000 + "]" * 20_000 + "\n")

    assert "nest" in refused(path)  # ours, or libyaml's "exceeded maximum nesting depth"


def test_yaml_nested_deeper_than_an_inventory_needs_is_refused(t4, tmp_path):
    value = "".join(f"\n{'  ' * (level + 2)}k{level}:" for level in range(12)) + " x"
    path = yaml_file(tmp_path, f"- hostname: gpu-01\n  region: bj\n  cards: 0\n  labels:{value}\n")

    assert "nested too deeply (at most 10 levels)" in refused(path)
