"""Every change to a running lease's cards goes through its backend, and the access details are
the backend's answer: a Slurm lease swapped or resized changes its Slurm job."""

import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import override_settings

from inventory.models import Card
from leasing.backends import PermanentBackendError, TransientBackendError
from leasing.backends import slurm as slurm_backend
from leasing.backends.local import LocalBackend
from leasing.choices import LeaseStatus
from leasing.lifecycle import maintenance, provisioning, resize
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
def slurm_node(a100):
    return make_node(
        a100, cards=4, hostname="gpu01", labels={"backend": "slurm", "slurm:gres:a100-test": "a100"}
    )


def active(lease):
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def changed(lease):
    """The worker's part: the change task, as the queue would run it."""
    lease_tasks.change_lease(lease.pk)
    lease.refresh_from_db()
    return lease


def held_indices(lease, now):
    return sorted(lease.allocations.filter(end_at__gt=now).values_list("card__index", flat=True))


def live_jobs(fake, lease):
    return [j for j in fake.jobs.values() if j.name == f"cardpool-{lease.pk}"]


def test_a_faulty_card_swap_moves_the_slurm_job_off_the_card(
    client, frozen, fake, alice, ops, vision, a100, slurm_node, sent_tasks
):
    lease = active(ask(alice, vision, a100, count=1))
    (old_job,) = live_jobs(fake, lease)
    faulty = Card.objects.get(node=slurm_node, index=old_job.indices[0])
    frozen.shift(timedelta(minutes=10))
    assert maintenance.card_mark_faulty(user=ops, card=faulty, note="XID 79") == "moved"
    lease.refresh_from_db()
    # Until the backend answers, the lease shows what Slurm still gives, marked pending.
    assert lease.access["backend"] == "slurm" and "pending_change" in lease.access
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert "the backend is updating these details" in page
    lease = changed(lease)
    (job,) = live_jobs(fake, lease)
    assert job.job_id != old_job.job_id and faulty.index not in job.indices
    assert lease.access["backend"] == "slurm" and "pending_change" not in lease.access
    (node,) = lease.access["nodes"]
    assert node["job_id"] == job.job_id and node["devices"] == job.indices
    assert node["shell"].startswith("srun --jobid=")
    assert lease.events.filter(kind="backend_changed").count() == 1
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    assert f"srun --jobid={job.job_id} --overlap --pty bash" in page
    # The access details are the job's (the ssh line of "Work on the cards" is pam_slurm_adopt's).
    access = "".join(re.findall(r'<pre class="access"[^>]*>(.*?)</pre>', page, re.S))
    assert "ssh alice@" not in access and "updating these details" not in page
    # Idempotent: told again, Slurm keeps the job.
    assert not provisioning.change_step(lease_id=lease.pk)  # nothing pending any more
    assert provisioning.holding_of(lease).backend == "slurm"
    assert slurm_backend.SlurmBackend().change(provisioning.holding_of(lease))["job_ids"] == [
        job.job_id
    ]
    assert [j.job_id for j in live_jobs(fake, lease)] == [job.job_id]


def test_a_slurm_resize_in_place_changes_the_jobs_gres(
    frozen, fake, alice, vision, a100, slurm_node
):
    lease = active(ask(alice, vision, a100, count=1, duration=hours(4)))
    (first,) = live_jobs(fake, lease)
    frozen.shift(hours(1))
    lease = changed(resize.lease_resize(lease=lease, user=alice, count=3))
    # Growing keeps the job and adds one for the new cards: nothing the holder runs is cut.
    assert first.job_id in fake.jobs
    jobs = live_jobs(fake, lease)
    assert sum(len(j.indices) for j in jobs) == 3
    assert sorted(lease.access["job_ids"]) == sorted(j.job_id for j in jobs)
    assert sorted(d for n in lease.access["nodes"] for d in n["devices"]) == sorted(
        i for j in jobs for i in j.indices
    )
    frozen.shift(hours(1))
    lease = changed(resize.lease_resize(lease=lease, user=alice, count=1))
    (job,) = live_jobs(fake, lease)  # shrinking replaces the jobs by one holding one card
    assert len(job.indices) == 1 and lease.access["job_ids"] == [job.job_id]


def test_a_shrink_on_a_full_node_replaces_the_job_old_first(
    frozen, fake, alice, bob, vision, nlp, a100, slurm_node
):
    lease = active(ask(alice, vision, a100, count=3, duration=hours(4)))
    other = active(ask(bob, nlp, a100, count=1, duration=hours(4)))
    assert sum(len(j.indices) for j in fake.jobs.values()) == 4  # Slurm's node is full
    frozen.shift(hours(1))
    lease = changed(resize.lease_resize(lease=lease, user=alice, count=2))
    (job,) = live_jobs(fake, lease)
    assert len(job.indices) == 2 and lease.access["job_ids"] == [job.job_id]
    assert live_jobs(fake, other)  # the neighbour's job is untouched


def test_a_local_lease_swapped_shows_its_new_device(frozen, alice, ops, vision, a100):
    make_node(a100, cards=2, domains=1, hostname="pair")
    lease = active(ask(alice, vision, a100, count=1))
    (device,) = lease.access["nodes"][0]["devices"]
    maintenance.card_mark_faulty(user=ops, card=Card.objects.get(index=device))
    lease = changed(lease)
    assert lease.access["backend"] == "local"
    assert lease.access["nodes"][0]["devices"] == [1 - device]
    assert BackendCall.objects.get(lease=lease, action="change").ok


class RefusingChange(LocalBackend):
    name = "refusing"

    def change(self, holding):
        raise PermanentBackendError("the node's agent refuses the new device")


class BusyChange(LocalBackend):
    name = "busy"

    def change(self, holding):
        raise TransientBackendError("controller busy")


def backend(path):
    return override_settings(CARDPOOL={**settings.CARDPOOL, "BACKEND": path})


@backend("tests.leasing.test_backend_change.RefusingChange")
def test_a_change_the_backend_refuses_fails_the_lease(frozen, alice, ops, vision, a100):
    make_node(a100, cards=2, domains=1, hostname="pair")
    lease = active(ask(alice, vision, a100, count=1))
    maintenance.card_mark_faulty(user=ops, card=Card.objects.get(index=0))
    lease = changed(lease)
    assert lease.status == LeaseStatus.FAILED and "refuses" in lease.failure_reason


@backend("tests.leasing.test_backend_change.BusyChange")
def test_a_lost_or_failing_change_is_resent_by_the_sweep_but_bounded(
    frozen, alice, ops, vision, a100, sent_tasks
):
    make_node(a100, cards=2, domains=1, hostname="pair")
    lease = active(ask(alice, vision, a100, count=1, duration=hours(8)))
    maintenance.card_mark_faulty(user=ops, card=Card.objects.get(index=0))  # its task is lost
    for _ in range(3 * provisioning.CHANGE_ATTEMPTS):
        frozen.shift(timedelta(seconds=settings.CARDPOOL["STUCK_SECONDS"] + 1))
        sent_tasks.clear()
        lease_tasks.sweep()
        for task in [t for t in sent_tasks if t.name == "leasing.tasks.change_lease"]:
            try:
                lease_tasks.change_lease(*task.args)
            except TransientBackendError:
                pass
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.FAILED and "kept failing" in lease.failure_reason
    calls = BackendCall.objects.filter(lease=lease, action="change").count()
    assert calls == provisioning.CHANGE_ATTEMPTS


def test_after_a_swap_the_lease_lists_only_the_card_it_holds_and_the_notice_says_so(
    client, api, frozen, alice, ops, vision, a100, sent_tasks, django_capture_on_commit_callbacks
):
    from django.utils import translation

    from leasing.models import Notification

    make_node(a100, cards=4, domains=1, hostname="sz-4090-01")
    lease = active(ask(alice, vision, a100, count=1))
    (device,) = lease.access["nodes"][0]["devices"]
    frozen.shift(timedelta(minutes=10))
    with django_capture_on_commit_callbacks(execute=True):
        maintenance.card_mark_faulty(user=ops, card=Card.objects.get(index=device))
    lease = changed(lease)
    (now_device,) = held_indices(lease, frozen_now())
    assert now_device != device

    client.force_login(alice)
    client.cookies["django_language"] = "en"
    listed = client.get("/leases/").content.decode()
    assert f"sz-4090-01:{now_device}<" in listed and f"sz-4090-01:{device}," not in listed
    page = client.get(f"/leases/{lease.pk}/").content.decode()
    cards_table = page.split('id="lease-cards"', 1)[1].split("</table>", 1)[0]
    assert cards_table.count("<tr><td>") == 1
    api.force_authenticate(alice)
    body = api.get(f"/api/v1/leases/{lease.pk}/", HTTP_ACCEPT_LANGUAGE="en").json()
    assert [a["card_index"] for a in body["allocations"]] == [now_device]
    assert body["access"]["nodes"][0]["devices"] == [now_device]

    # The holder's notice is a swap notice of its own kind, with what was swapped for what.
    (task,) = [t for t in sent_tasks if t.args[1:] == ("card_swapped",)]
    lease_tasks.notify_lease(*task.args)
    note = Notification.objects.get(user=alice, lease=lease)
    assert note.kind == "card_swapped" and "故障卡已更换" in note.title  # the site's language
    assert note.data["from_card"] == f"sz-4090-01:{device}"
    assert note.data["to_card"] == f"sz-4090-01:{now_device}"
    assert not Notification.objects.filter(user=alice, kind="lease_active").exists()
    lease_tasks.notify_lease(*task.args)  # told once
    assert Notification.objects.filter(user=alice, kind="card_swapped").count() == 1
    with translation.override("zh-hans"):
        from leasing.notify.wording import notify_lease_event

        Notification.objects.all().delete()
        (chinese,) = notify_lease_event(lease_id=lease.pk, kind="card_swapped")
    assert "swapped" not in chinese.title


def frozen_now():
    from django.utils import timezone

    return timezone.now()


def test_a_swap_while_the_cards_are_being_handed_over_is_made_once_active(
    frozen, fake, alice, ops, vision, a100, slurm_node, sent_tasks
):
    lease = ask(alice, vision, a100, count=1)
    holding = provisioning.holding_of(lease)  # the worker read the holding…
    faulty = Card.objects.get(node=slurm_node, index=holding.nodes[0].indices[0])
    maintenance.card_mark_faulty(user=ops, card=faulty)  # …then the card failed
    access = slurm_backend.SlurmBackend().provision(holding)
    assert provisioning.lease_activate(lease_id=lease.pk, access=access)
    lease.refresh_from_db()
    assert "pending_change" in lease.access
    lease = changed(lease)
    (job,) = live_jobs(fake, lease)
    assert faulty.index not in job.indices and "pending_change" not in lease.access


def test_the_swap_notice_is_worded_in_the_holders_language_and_again_for_the_reader(
    frozen, alice, ops, vision, a100, sent_tasks, django_capture_on_commit_callbacks
):
    from django.utils import translation

    from leasing.models import Notification
    from leasing.notify.messages import notice_text

    alice.profile.language = "zh-hans"
    alice.profile.save()
    make_node(a100, cards=4, domains=1, hostname="sz-4090-02")
    lease = active(ask(alice, vision, a100, count=1))
    (device,) = lease.access["nodes"][0]["devices"]
    with django_capture_on_commit_callbacks(execute=True):
        maintenance.card_mark_faulty(user=ops, card=Card.objects.get(index=device))
    (task,) = [t for t in sent_tasks if t.args[1:] == ("card_swapped",)]
    lease_tasks.notify_lease(*task.args)  # the worker's language is English here
    note = Notification.objects.get(user=alice, kind="card_swapped")
    assert "故障卡已更换" in note.title  # for email and webhooks: the holder's language
    assert note.data["message"] == "card_swapped"
    with translation.override("en"):
        title, body = notice_text(note)  # the portal words it for whoever reads it
    assert "a faulty card was swapped" in title and "sz-4090-02" in body
