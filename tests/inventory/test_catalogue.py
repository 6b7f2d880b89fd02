"""The card catalogue: loaded by migration, re-synced idempotently, checked before writing."""

from __future__ import annotations

import importlib
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from inventory.catalogue import catalogue_sync, load_catalogue
from inventory.models import CardModel

REQUIRED_SLUGS = {
    "a100-80g-sxm",
    "a100-40g-pcie",
    "h100-sxm",
    "h800",
    "h20",
    "h200-sxm",
    "l40s",
    "rtx-4090",
    "v100-32g",
    "v100-16g",
    "t4",
    "p100",
    "ascend-910b",
    "mlu370-x8",
    "dcu-k100",
    "kunlunxin-r200",
    "mtt-s4000",
    "metax-c500",
    "iluvatar-bi-v100",
    "mi300x",
}

GOOD_ENTRY = {
    "slug": "good-card",
    "vendor": "nvidia",
    "name": "Good card",
    "memory_gb": 16,
    "fp16_tflops": 65,
    "source_url": "https://example.com/good",
}


def write_catalogue(tmp_path: Path, *entries: dict) -> Path:
    path = tmp_path / "catalogue.yaml"
    path.write_text(yaml.safe_dump(list(entries)), encoding="utf-8")
    return path


def test_migration_loads_the_catalogue(db):
    slugs = set(CardModel.objects.values_list("slug", flat=True))
    assert REQUIRED_SLUGS <= slugs
    vendors = set(
        CardModel.objects.filter(slug__in=REQUIRED_SLUGS).values_list("vendor", flat=True)
    )
    assert len(vendors) >= 6
    assert not CardModel.objects.filter(slug__in=REQUIRED_SLUGS, source_url="").exists()


def test_migration_writes_through_the_historical_model(db):
    """The 0002 migration's function works with the class ``apps.get_model`` gives it."""
    CardModel.objects.all().delete()
    state = MigrationLoader(connection).project_state(("inventory", "0002_card_catalogue"))
    migration = importlib.import_module("inventory.migrations.0002_card_catalogue")

    migration.load_card_catalogue(state.apps, None)

    assert set(CardModel.objects.values_list("slug", flat=True)) == {
        e["slug"] for e in load_catalogue()
    }


def test_sync_is_idempotent(db):
    assert catalogue_sync() == (0, 0)  # the migration already loaded it

    CardModel.objects.filter(slug="h100-sxm").update(fp16_tflops=Decimal("1.0"), notes="edited")
    assert catalogue_sync() == (0, 1)
    assert CardModel.objects.get(slug="h100-sxm").fp16_tflops == Decimal("989.4")
    assert catalogue_sync() == (0, 0)


def test_sync_keeps_operator_price_and_fields_the_file_leaves_out(db):
    CardModel.objects.filter(slug="t4").update(
        price_per_hour=Decimal("0.99"), visible_devices_env="MY_DEVICES"
    )

    assert catalogue_sync() == (0, 0)
    t4 = CardModel.objects.get(slug="t4")
    assert t4.price_per_hour == Decimal("0.99")
    assert t4.visible_devices_env == "MY_DEVICES"


def test_sync_sets_price_on_create(db):
    CardModel.objects.filter(slug="t4").delete()

    assert catalogue_sync() == (1, 0)
    assert CardModel.objects.get(slug="t4").price_per_hour == Decimal("1.50")


def test_unsupported_precisions_are_null(db):
    a100 = CardModel.objects.get(slug="a100-80g-sxm")
    h100 = CardModel.objects.get(slug="h100-sxm")
    assert a100.fp8_tflops is None
    assert not a100.supports("fp8")
    assert h100.fp8_tflops == Decimal("1978.9")
    assert h100.supports("fp8")
    for slug in ("v100-32g", "v100-16g", "t4", "p100"):
        card = CardModel.objects.get(slug=slug)
        assert card.bf16_tflops is None, slug
        assert card.tf32_tflops is None, slug
        assert card.fp8_tflops is None, slug


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"colour": "green"}, "unknown key"),
        ({"vendor": "intel"}, "vendor"),
        ({"memory_gb": None}, "missing required memory_gb"),
        ({"name": ""}, "missing required name"),
        ({"memory_gb": 0}, "memory_gb"),
        ({"fp16_tflops": 362.05}, "decimal place"),
        ({"tdp_w": "hot"}, "tdp_w"),
        ({"interconnect_kind": "infiniband"}, "interconnect_kind"),
        ({"family": "not a slug"}, "family"),
    ],
)
def test_bad_entry_raises_naming_its_slug_and_writes_nothing(db, tmp_path, change, problem):
    bad = {**GOOD_ENTRY, "slug": "bad-card", **change}
    path = write_catalogue(tmp_path, GOOD_ENTRY, bad)

    with pytest.raises(ValueError, match="bad-card") as excinfo:
        catalogue_sync(path=path)

    assert problem in str(excinfo.value)
    assert not CardModel.objects.filter(slug__in=["good-card", "bad-card"]).exists()


def test_entry_without_slug_is_reported_by_position(db, tmp_path):
    path = write_catalogue(
        tmp_path, GOOD_ENTRY, {k: v for k, v in GOOD_ENTRY.items() if k != "slug"}
    )

    with pytest.raises(ValueError, match=r"entry #2: missing required slug"):
        catalogue_sync(path=path)


def test_duplicate_slug_is_rejected(db, tmp_path):
    path = write_catalogue(tmp_path, GOOD_ENTRY, GOOD_ENTRY)

    with pytest.raises(ValueError, match="'good-card': slug appears more than once"):
        catalogue_sync(path=path)


def test_load_catalogue_command(db, tmp_path):
    out = StringIO()
    call_command("load_catalogue", stdout=out)
    assert "0 created, 0 updated" in out.getvalue()

    out = StringIO()
    call_command("load_catalogue", "--path", str(write_catalogue(tmp_path, GOOD_ENTRY)), stdout=out)
    assert "1 created, 0 updated" in out.getvalue()

    with pytest.raises(CommandError, match="bad-card"):
        call_command(
            "load_catalogue",
            "--path",
            str(write_catalogue(tmp_path, {**GOOD_ENTRY, "slug": "bad-card", "vendor": "x"})),
        )
