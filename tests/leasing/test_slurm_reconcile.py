"""Reconciliation with Slurm and the inventory import from it (in-memory Slurm)."""

from pathlib import Path

import pytest
from django.core.management import call_command

from inventory.models import Card, Node
from leasing.backends import slurm as slurm_backend
from leasing.backends.slurm_parse import parse_nodes
from leasing.backends.slurm_sync import slurm_sync
from leasing.choices import EndReason, LeaseStatus
from leasing.lifecycle import provisioning
from leasing.lifecycle import tasks as lease_tasks
from leasing.lifecycle.reconcile import slurm_reconcile
from leasing.models import Notification
from leasing.notify.messages import notice_text
from tests.factories import CardModelFactory, make_node
from tests.leasing.conftest import ask
from tests.leasing.slurm_fake import FakeSlurm

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


@pytest.fixture
def fake(monkeypatch, settings):
    settings.CARDPOOL = {**settings.CARDPOOL, "BACKEND": "slurm"}
    slurm = FakeSlurm(nodes_spec={"gpu01": [(i, "a100") for i in range(4)]})
    monkeypatch.setattr(slurm_backend, "SlurmCli", lambda config=None: slurm)
    return slurm


@pytest.fixture
def two_leases(frozen, fake, alice, vision, a100):
    make_node(a100, cards=4, hostname="gpu01", labels={"slurm:gres:a100-test": "a100"})
    leases = [ask(alice, vision, a100, count=2) for _ in range(2)]
    for lease in leases:
        assert provisioning.provision_step(lease_id=lease.pk)
    return leases


def test_a_vanished_job_ends_its_lease_and_tells_the_holder(fake, two_leases):
    healthy, gone = two_leases  # the healthy one comes first and must be left alone
    job = next(j for j in fake.jobs.values() if j.name == f"cardpool-{gone.pk}")
    del fake.jobs[job.job_id]
    done = slurm_reconcile(backend=slurm_backend.SlurmBackend())
    assert done["ended"] == [gone.pk] and done["cancelled"] == []
    gone.refresh_from_db()
    healthy.refresh_from_db()
    assert healthy.status == LeaseStatus.ACTIVE
    assert gone.status == LeaseStatus.RELEASING
    (note,) = Notification.objects.filter(lease=gone, kind="lease_ended")
    assert "cancelled outside Cardpool" in notice_text(note)[0]  # worded for the reader (en)
    assert note.data["message"] == "ended" and note.data["params"]["why"] == "slurm_cancelled"
    # The release step finishes it; the generic "ended" notice does not come twice.
    lease_tasks.release_lease.run(gone.pk, EndReason.ADMIN)
    gone.refresh_from_db()
    assert gone.status == LeaseStatus.ENDED and gone.end_reason == EndReason.ADMIN
    assert Notification.objects.filter(lease=gone, kind="lease_ended").count() == 1
    # Running again changes nothing.
    assert slurm_reconcile(backend=slurm_backend.SlurmBackend())["ended"] == []


def test_a_down_node_ends_the_lease_as_failed(fake, two_leases):
    fake.jobs.clear()
    fake.states["gpu01"] = "DOWN*"
    done = slurm_reconcile(backend=slurm_backend.SlurmBackend())
    assert sorted(done["ended"]) == sorted(lease.pk for lease in two_leases)
    for lease in two_leases:
        lease.refresh_from_db()
        assert lease.events.filter(kind=EndReason.FAILED).exists()
    assert (
        "gpu01 is down" in notice_text(Notification.objects.filter(kind="lease_ended").first())[0]
    )


def test_a_job_without_a_lease_is_cancelled(fake, two_leases, alice):
    from leasing.lifecycle import changes

    ended = two_leases[1]
    changes.lease_release(lease=ended, user=alice)
    provisioning.release_step(lease_id=ended.pk)
    fake.next_id += 1
    fake._salloc(  # a job left over from the ended lease (a lost release)
        ["--nodelist=gpu01", "--gres=gpu:a100:1", f"--job-name=cardpool-{ended.pk}", "--time=5"],
        "alice",
    )
    fake._salloc(  # not Cardpool's: never touched
        ["--nodelist=gpu01", "--gres=gpu:a100:1", "--job-name=wrap", "--time=5"], "bob"
    )
    done = slurm_reconcile(backend=slurm_backend.SlurmBackend())
    assert len(done["cancelled"]) == 1 and done["ended"] == []
    assert sorted(j.name for j in fake.jobs.values()) == [f"cardpool-{two_leases[0].pk}", "wrap"]


def test_nothing_is_asked_of_slurm_when_no_node_uses_it(db, settings, monkeypatch):
    settings.CARDPOOL = {**settings.CARDPOOL, "BACKEND": "local"}
    slurm = FakeSlurm()
    monkeypatch.setattr(slurm_backend, "SlurmCli", lambda config=None: slurm)
    assert lease_tasks.reconcile_slurm.run() == {"checked": 0, "ended": [], "cancelled": []}
    assert slurm.calls == []


def test_a_failed_read_ends_nothing(fake, two_leases):
    fake.fail_next = "squeue: error: Unable to contact slurm controller"
    assert "error" in lease_tasks.reconcile_slurm.run()
    for lease in two_leases:
        lease.refresh_from_db()
        assert lease.status == LeaseStatus.ACTIVE


# --- sync_slurm ----------------------------------------------------------------------------


@pytest.fixture
def models(db):
    return {
        "a100": CardModelFactory(slug="a100-80g-sxm"),
        "h800": CardModelFactory(slug="h800"),
    }


TYPES = {"a100": "a100-80g-sxm", "h800": "h800"}


def test_sync_imports_nodes_and_cards_and_is_idempotent(models):
    nodes = parse_nodes((FIXTURES / "show_node_idle.txt").read_text())
    first = slurm_sync(nodes=nodes, type_map=TYPES, region="lab")
    assert first.imported.nodes_created == 2 and first.imported.cards_created == 8
    gpu01 = Node.objects.get(hostname="gpu01")
    assert gpu01.labels["backend"] == "slurm" and gpu01.labels["slurm:gres:h800"] == "h800"
    assert gpu01.cpu_cores == 8 and gpu01.status == Node.Status.ACTIVE
    assert list(gpu01.cards.values_list("index", "card_model__slug")) == [
        (0, "a100-80g-sxm"),
        (1, "a100-80g-sxm"),
        (2, "a100-80g-sxm"),
        (3, "a100-80g-sxm"),
        (4, "h800"),
        (5, "h800"),
    ]
    again = slurm_sync(nodes=nodes, type_map=TYPES, region="lab")
    assert not again.changed, again.summary()


def test_sync_follows_drain_and_leaves_an_operators_maintenance_alone(models):
    idle = parse_nodes((FIXTURES / "show_node_idle.txt").read_text())
    drained = parse_nodes((FIXTURES / "show_node_drain.txt").read_text())
    slurm_sync(nodes=idle, type_map=TYPES, region="lab")
    Node.objects.filter(hostname="gpu01").update(status=Node.Status.MAINTENANCE)  # an operator
    result = slurm_sync(nodes=drained, type_map=TYPES, region="lab")
    assert result.status_changes == ["gpu02 active→maintenance"]
    assert not slurm_sync(nodes=drained, type_map=TYPES, region="lab").changed
    back = slurm_sync(nodes=idle, type_map=TYPES, region="lab")
    assert back.status_changes == ["gpu02 maintenance→active"]
    assert Node.objects.get(hostname="gpu01").status == Node.Status.MAINTENANCE
    gone = slurm_sync(nodes=[n for n in idle if n.name == "gpu01"], type_map=TYPES, region="lab")
    assert gone.status_changes == ["gpu02 active→offline"]


def test_unmapped_gres_types_are_skipped_with_a_warning(models):
    nodes = parse_nodes((FIXTURES / "show_node_idle.txt").read_text())
    result = slurm_sync(nodes=nodes, type_map={"a100": "a100-80g-sxm"}, region="lab")
    assert Card.objects.filter(card_model__slug="h800").count() == 0
    assert any("gpu:h800" in w and "--map h800=SLUG" in w for w in result.warnings)


def test_sync_slurm_command_from_a_file(models, capsys):
    path = str(FIXTURES / "show_node_oneline.txt")
    call_command(
        "sync_slurm", "--from-file", path, "--map", "a100=a100-80g-sxm", "--map", "h800=h800"
    )
    call_command(
        "sync_slurm", "--from-file", path, "--map", "a100=a100-80g-sxm", "--map", "h800=h800"
    )
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("nodes: 2 created")
    assert (
        out[1].startswith("nodes: 0 created, 0 updated, 2 unchanged")
        and "status: unchanged" in out[1]
    )
    assert Node.objects.get(hostname="gpu02").region.slug == "slurm"
