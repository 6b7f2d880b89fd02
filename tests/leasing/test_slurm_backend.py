"""The slurm backend against an in-memory Slurm (tests/leasing/slurm_fake.py)."""

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.test import override_settings

from leasing.backends import TransientBackendError, get_backend
from leasing.backends import slurm as slurm_backend
from leasing.backends.local import LocalBackend
from leasing.backends.slurm import SlurmBackend, SlurmCli, parse_gres_types
from leasing.choices import LeaseStatus
from leasing.lifecycle import changes, provisioning
from leasing.lifecycle import tasks as lease_tasks
from leasing.models import BackendCall
from tests.factories import make_node
from tests.leasing.conftest import ask, hours
from tests.leasing.slurm_fake import FakeSlurm


@pytest.fixture
def fake(monkeypatch):
    slurm = FakeSlurm(nodes_spec={"gpu01": [(i, "a100") for i in range(4)]})
    monkeypatch.setattr(slurm_backend, "SlurmCli", lambda config=None: slurm)
    return slurm


@pytest.fixture
def slurm_node(a100, settings):
    # provisioning.py asks get_backend() without the lease: the site-wide switch decides.
    settings.CARDPOOL = {**settings.CARDPOOL, "BACKEND": "slurm"}
    return make_node(
        a100, cards=4, hostname="gpu01", labels={"backend": "slurm", "slurm:gres:a100-test": "a100"}
    )


def provision(lease):
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def test_provision_makes_a_job_of_the_holder_holding_the_cards(
    frozen, fake, alice, vision, a100, slurm_node
):
    lease = provision(ask(alice, vision, a100, count=2))
    assert lease.status == LeaseStatus.ACTIVE
    (job,) = fake.jobs.values()
    assert (job.name, job.user, job.node, job.gres_type) == (
        f"cardpool-{lease.pk}",
        "alice",
        "gpu01",
        "a100",
    )
    assert len(job.indices) == 2
    assert job.limit == 2 * 60 + 2  # the lease plus the grace
    salloc = next(c for c in fake.calls if c[0] == "salloc")
    assert salloc[2] == "alice" and "--no-shell" in salloc[1] and "--nodelist=gpu01" in salloc[1]
    (node,) = lease.access["nodes"]
    assert node["shell"] == f"srun --jobid={job.job_id} --overlap --pty bash"
    assert node["devices"] == job.indices and lease.access["slurm_user"] == "alice"
    assert BackendCall.objects.get(lease=lease, action="provision").backend == "slurm"


def test_provision_is_idempotent_on_the_lease_id(frozen, fake, alice, vision, a100, slurm_node):
    lease = provision(ask(alice, vision, a100, count=2))
    again = SlurmBackend().provision(provisioning.holding_of(lease))
    assert len(fake.jobs) == 1 and again["job_ids"] == lease.access["job_ids"]


def test_profile_slurm_user_is_used(frozen, fake, alice, vision, a100, slurm_node):
    alice.profile.slurm_user = "bob"
    alice.profile.save()
    provision(ask(alice, vision, a100))
    assert [j.user for j in fake.jobs.values()] == ["bob"]


def test_unknown_unix_user_fails_the_lease_with_a_reason(
    frozen, fake, alice, vision, a100, slurm_node
):
    fake.users = set()
    lease = ask(alice, vision, a100)
    lease_tasks.provision_lease.run(lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.FAILED
    assert "no Unix user alice" in lease.failure_reason
    assert fake.jobs == {}


def test_cards_held_outside_cardpool_are_a_transient_error(
    frozen, fake, alice, vision, a100, slurm_node
):
    fake._salloc(
        ["--nodelist=gpu01", "--gres=gpu:a100:4", "--job-name=wrap", "--time=0-01:00:00"], "bob"
    )
    lease = ask(alice, vision, a100)
    with pytest.raises(TransientBackendError, match="outside Cardpool"):
        SlurmBackend().provision(provisioning.holding_of(lease))


def test_release_cancels_the_job(frozen, fake, alice, vision, a100, slurm_node):
    lease = provision(ask(alice, vision, a100, count=2))
    changes.lease_release(lease=lease, user=alice)
    assert SlurmBackend().status(provisioning.holding_of(lease)) == "active"
    assert provisioning.release_step(lease_id=lease.pk)
    assert fake.jobs == {}
    assert SlurmBackend().status(provisioning.holding_of(lease)) == "released"
    SlurmBackend().release(provisioning.holding_of(lease))  # again: no error


def test_extend_raises_the_time_limit_from_the_new_end(
    frozen, fake, alice, vision, a100, slurm_node
):
    lease = provision(ask(alice, vision, a100))
    changes.lease_extend(lease=lease, user=alice, minutes=60)
    assert lease_tasks.extend_lease_backend.run(lease.pk) == 1
    (job,) = fake.jobs.values()
    # 10 minutes run (the fake's RunTime) + 3 hours left + the grace
    assert job.limit == 10 + 180 + 2
    assert lease_tasks.extend_lease_backend.run(lease.pk) == 0  # already high enough


def test_backend_follows_the_node_label(frozen, fake, alice, vision, a100, slurm_node, settings):
    make_node(a100, cards=4, hostname="plain")
    on_slurm = ask(alice, vision, a100, count=4)
    elsewhere = ask(alice, vision, a100, count=4)
    hosts = {
        lease.pk: lease.allocations.values_list("card__node__hostname", flat=True).first()
        for lease in (on_slurm, elsewhere)
    }
    by_host = {h: pk for pk, h in hosts.items()}
    from leasing.models import Lease

    settings.CARDPOOL = {**settings.CARDPOOL, "BACKEND": "local"}
    assert isinstance(
        get_backend(holding=provisioning.holding_of(Lease.objects.get(pk=by_host["gpu01"]))),
        SlurmBackend,
    )
    assert isinstance(
        get_backend(holding=provisioning.holding_of(Lease.objects.get(pk=by_host["plain"]))),
        LocalBackend,
    )
    assert isinstance(get_backend(), LocalBackend)  # the default stays local


def test_a_release_goes_to_the_backend_of_the_node_after_the_cards_are_cut(
    frozen, fake, alice, vision, a100, slurm_node, settings
):
    """Releasing runs after the lease's periods are cut at the release time: the node's label
    must still choose the backend, or the Slurm job would outlive the lease."""
    settings.CARDPOOL = {**settings.CARDPOOL, "BACKEND": "local"}
    lease = provision(ask(alice, vision, a100, count=2))
    (job,) = fake.jobs.values()
    frozen.shift(timedelta(minutes=10))
    changes.lease_release(lease=lease, user=alice)
    assert provisioning.release_step(lease_id=lease.pk)
    assert BackendCall.objects.get(lease=lease, action="release").backend == "slurm"
    assert not any(j.live for j in fake.jobs.values()) and job.job_id not in {
        j.job_id for j in fake.queue() if j.live
    }


def test_gres_type_setting_and_run_as_wrappers():
    assert parse_gres_types("a100-80g-sxm=a100, h800=h800,bad") == {
        "a100-80g-sxm": "a100",
        "h800": "h800",
    }
    base = {"BIN_DIR": "/opt/slurm/bin", "CONF": "/etc/slurm/slurm.conf", "COMMAND_TIMEOUT": 5}
    sudo = SlurmCli({**base, "RUN_AS": "sudo"}).argv("salloc", ["-I5"], as_user="alice")
    assert sudo == [
        "sudo",
        "-n",
        "-u",
        "alice",
        "--",
        "env",
        "SLURM_CONF=/etc/slurm/slurm.conf",
        "/opt/slurm/bin/salloc",
        "-I5",
    ]
    uid = SlurmCli({**base, "RUN_AS": "uid"}).argv("salloc", ["-I5"], as_user="alice")
    assert uid == ["/opt/slurm/bin/salloc", "--uid=alice", "-I5"]
    assert SlurmCli({**base, "RUN_AS": "runuser"}).argv("squeue", ["-h"]) == [
        "/opt/slurm/bin/squeue",
        "-h",
    ]


@override_settings(CARDPOOL_SLURM={**django_settings.CARDPOOL_SLURM, "BIN_DIR": "/nonexistent"})
def test_a_missing_slurm_client_is_a_permanent_error():
    from leasing.backends import PermanentBackendError

    with pytest.raises(PermanentBackendError, match="not installed"):
        SlurmCli().queue()


def test_a_lease_already_over_is_not_provisioned(frozen, fake, alice, vision, a100, slurm_node):
    from leasing.backends import PermanentBackendError

    lease = ask(alice, vision, a100, duration=hours(1))
    frozen.shift(timedelta(hours=2))
    with pytest.raises(PermanentBackendError, match="ended before"):
        SlurmBackend().provision(provisioning.holding_of(lease))
