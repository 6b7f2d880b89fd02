"""The dashboard's "next free" reads the one picture of the future (scheduler.picture): a
waiting lease's planned cards make it later, exactly as the picture says."""

from leasing.choices import LeaseStatus
from leasing.lifecycle import provisioning
from leasing.scheduler.picture import model_picture
from portal.views_pool import FREE_FOR, NEXT_FREE_WITHIN, next_free
from tests.factories import make_node
from tests.leasing.conftest import T0, ask, hours


def test_a_waiting_leases_planned_cards_make_next_free_later(
    frozen, client, alice, bob, vision, nlp, a100
):
    make_node(a100, cards=2, domains=1, hostname="nf2")
    held = ask(alice, vision, a100, count=2, duration=hours(2))
    provisioning.provision_step(lease_id=held.pk)
    assert next_free(T0, [a100.pk]) == {a100.pk: T0 + hours(2)}  # free when alice's end

    waiting = ask(bob, nlp, a100, count=2, duration=hours(10))
    assert waiting.status == LeaseStatus.QUEUED
    waiting.refresh_from_db()
    assert waiting.estimated_start == T0 + hours(2) and len(waiting.planned_cards) == 2
    # bob's plan holds both cards from 11:00 to 21:00: one card is free from 21:00
    assert next_free(T0, [a100.pk]) == {a100.pk: T0 + hours(12)}
    future = model_picture(a100.pk, start=T0, end=T0 + NEXT_FREE_WITHIN, now=T0)
    assert future.next_free(1, FREE_FOR, after=T0) == T0 + hours(12)  # the same source

    client.force_login(alice)
    page = client.get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert f'data-frees="{a100.slug}"' in page
    assert "1 card free from 12-01 21:00" in page
