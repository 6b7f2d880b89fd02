"""The lease pages in the browser's shape: request form, preview, my leases, detail, calendar."""

import pytest

from leasing.choices import LeaseStatus
from leasing.lifecycle import provisioning
from leasing.models import Lease
from tests.leasing.conftest import T0, ask, hours


@pytest.fixture
def browser(client, alice):
    client.force_login(alice)
    client.cookies["django_language"] = "en"
    return client


def form_data(model, **kw):
    data = {
        "card_model": model.slug,
        "count": 2,
        "duration": 3,
        "unit": "hours",
        "start": "now",
        "team": "vision",
        "priority": "normal",
        "purpose": "training",
        "same_node": "on",
    }
    return data | kw


def test_request_form_places_the_lease_and_shows_it(browser, frozen, a100, small_pool):
    response = browser.post("/leases/new/", form_data(a100))
    lease = Lease.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/leases/{lease.pk}/"
    assert lease.status == LeaseStatus.PROVISIONING and lease.end_at == T0 + hours(3)
    page = browser.get(f"/leases/{lease.pk}/").content.decode()
    assert "Handing the cards over" in page
    provisioning.provision_step(lease_id=lease.pk)
    page = browser.get(f"/leases/{lease.pk}/").content.decode()
    assert "CUDA_VISIBLE_DEVICES=" in page and "Release now" in page


def test_a_form_sent_twice_books_once(browser, frozen, a100, small_pool):
    import re

    page = browser.get("/leases/new/").content.decode()
    key = re.search(r'name="request_key" value="([0-9a-f]{32})"', page).group(1)
    assert key not in browser.get("/leases/new/").content.decode()  # a fresh key per form
    first = browser.post("/leases/new/", form_data(a100, request_key=key))
    again = browser.post("/leases/new/", form_data(a100, request_key=key))  # a double click
    lease = Lease.objects.get()
    assert first["Location"] == again["Location"] == f"/leases/{lease.pk}/"
    # Back, change the form, send it again: told why, nothing written.
    changed = browser.post("/leases/new/", form_data(a100, count=1, request_key=key))
    assert changed.status_code == 200 and f"made lease {lease.pk}" in changed.content.decode()
    assert Lease.objects.count() == 1


def test_form_errors_are_shown_on_the_form_and_nothing_is_written(
    browser, frozen, a100, small_pool
):
    response = browser.post("/leases/new/", form_data(a100, count=50))
    assert response.status_code == 200
    assert "only 8" in response.content.decode()
    response = browser.post("/leases/new/", form_data(a100, start="later", start_at=""))
    assert "Pick the start time" in response.content.decode()
    assert not Lease.objects.exists()


def test_preview_says_free_now_or_estimated_start(browser, frozen, alice, vision, a100, small_pool):
    free = browser.get("/leases/preview/", form_data(a100), HTTP_HX_REQUEST="true").content.decode()
    assert "free now" in free
    ask(alice, vision, a100, count=8, duration=hours(2), same_node=False)
    later = browser.get(
        "/leases/preview/", form_data(a100), HTTP_HX_REQUEST="true"
    ).content.decode()
    # told as the lease page will: free at 11:00, plus room for smaller work that may pass
    # it within its slack (scheduler.eta: 2 x 1.5 h, at most 2 h) and 1 % of the 2 h wait
    # (1.2 min: 1, whole minutes rounded down)
    assert "Estimated start: 2026-12-01 13:01" in later
    assert not Lease.objects.filter(status=LeaseStatus.QUEUED).exists()


def test_my_leases_polls_for_live_status(browser, frozen, alice, vision, a100, small_pool):
    ask(alice, vision, a100)
    page = browser.get("/leases/").content.decode()
    assert 'hx-trigger="every 3s"' in page
    partial = browser.get("/leases/", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in partial and 'data-status="provisioning"' in partial


def test_release_and_extend_buttons(browser, frozen, alice, vision, a100, small_pool):
    lease = ask(alice, vision, a100)
    provisioning.provision_step(lease_id=lease.pk)
    browser.post(f"/leases/{lease.pk}/extend/", {"minutes": "60"})
    lease.refresh_from_db()
    assert lease.end_at == T0 + hours(3)
    bad = browser.post(f"/leases/{lease.pk}/extend/", {"minutes": "soon"}, follow=True)
    assert "whole number" in bad.content.decode()
    browser.post(f"/leases/{lease.pk}/release/")
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASING


def test_other_people_cannot_see_or_touch_the_lease(
    client, frozen, alice, bob, vision, a100, small_pool
):
    lease = ask(alice, vision, a100)
    client.force_login(bob)
    assert client.get(f"/leases/{lease.pk}/").status_code == 404
    assert client.post(f"/leases/{lease.pk}/release/").status_code == 404


def test_calendar_shows_free_cards_per_slot(browser, frozen, alice, vision, a100, small_pool):
    ask(alice, vision, a100, count=4, duration=hours(3))
    page = browser.get(f"/leases/calendar/{a100.slug}/").content.decode()
    assert "8 of 8 cards in service" in page
    assert 'class="num cal cal--some"' in page  # the first slot: 4 of 8 free
    assert browser.get(f"/leases/calendar/{a100.slug}/?days=x").status_code == 400


def test_pages_need_login(client, db):
    assert client.get("/leases/").status_code == 302
    assert client.get("/leases/new/").status_code == 302


def live_part(browser, lease):
    """What the lease page's 2-second poll gets."""
    return browser.get(
        f"/leases/{lease.pk}/", {"part": "status"}, HTTP_HX_REQUEST="true"
    ).content.decode()


def test_the_poll_brings_status_actions_cards_and_timeline(
    browser, frozen, alice, vision, a100, small_pool
):
    lease = ask(alice, vision, a100, count=2)
    part = live_part(browser, lease)
    assert "<html" not in part and 'data-status="provisioning"' in part
    assert "data-can-release" in part and "data-can-cancel" not in part
    provisioning.provision_step(lease_id=lease.pk)
    part = live_part(browser, lease)
    assert 'data-status="active"' in part and 'hx-trigger="every 2s"' in part
    assert "data-can-release" in part and "data-can-extend" in part
    # The cards table and the timeline are swapped out of band, with readable event names.
    assert 'id="lease-cards" hx-swap-oob="true"' in part and "gpu0-0" in part
    assert 'id="lease-timeline" hx-swap-oob="true"' in part
    assert "<strong>Cards handed over</strong> → Active" in part
    browser.post(f"/leases/{lease.pk}/release/")
    provisioning.release_step(lease_id=lease.pk)
    part = live_part(browser, lease)
    assert 'data-status="ended"' in part and "hx-trigger" not in part
    assert "data-can-" not in part
    assert "Booked until" in part and "Ended at" in part


def test_actions_are_on_the_page_for_the_state_it_may_reach(
    browser, frozen, alice, vision, a100, small_pool
):
    lease = ask(alice, vision, a100, count=8, same_node=False)
    waiting = ask(alice, vision, a100, count=1)
    assert waiting.status == LeaseStatus.QUEUED
    page = browser.get(f"/leases/{waiting.pk}/").content.decode()
    # Queued: cancel shown; release and extend there but off until the poll allows them.
    assert 'class="lease-action lease-action--cancel"' in page
    assert 'class="lease-action lease-action--release is-off"' in page
    assert 'class="lease-action lease-action--extend is-off"' in page
    assert "Cancel request" in page and "Estimated start" in page
    provisioning.provision_step(lease_id=lease.pk)
    browser.post(f"/leases/{waiting.pk}/cancel/")
    page = browser.get(f"/leases/{waiting.pk}/").content.decode()
    assert "lease-action" not in page  # over: no actions at all
    assert "<strong>Request withdrawn</strong> → Cancelled" in page


def test_access_details_are_one_line_that_sets_every_variable_on_the_node(
    browser, frozen, alice, vision, a100, small_pool
):
    lease = ask(alice, vision, a100)
    provisioning.provision_step(lease_id=lease.pk)
    env = {"CUDA_VISIBLE_DEVICES": "0", "NVIDIA_VISIBLE_DEVICES": "0"}
    Lease.objects.filter(pk=lease.pk).update(access={"nodes": [{"host": "gpu0", "env": env}]})
    page = browser.get(f"/leases/{lease.pk}/").content.decode()
    assert (
        "ssh -t alice@gpu0 &#x27;export CUDA_VISIBLE_DEVICES=0 NVIDIA_VISIBLE_DEVICES=0; "
        "exec $SHELL -l&#x27;</pre>" in page
    )


def test_lease_page_in_chinese(client, frozen, alice, vision, a100, small_pool):
    lease = ask(alice, vision, a100)
    provisioning.provision_step(lease_id=lease.pk)
    client.force_login(alice)
    page = client.get(f"/leases/{lease.pk}/").content.decode()  # zh-hans: the default
    assert '<html lang="zh-hans">' in page
    assert "<strong>卡已交付</strong> → 运行中" in page
    assert "已分配的卡" in page and "立即释放" in page and "用途：" in page
    calendar = client.get(f"/leases/calendar/{a100.slug}/").content.decode()
    assert "无空闲" in calendar and "申请 A100 test" in calendar


def test_request_form_prefills_from_the_link(browser, frozen, a100, small_pool):
    page = browser.get(
        f"/leases/new/?card_model={a100.slug}&count=4&duration=6&unit=hours&purpose=inference"
    ).content.decode()
    assert f'<option value="{a100.slug}" selected data-stack="cuda">' in page
    assert 'name="count" value="4"' in page and 'name="duration" value="6"' in page
    assert '<option value="inference" selected>' in page
    ignored = browser.get("/leases/new/?count=-3&unit=weeks&purpose=mining")
    assert ignored.status_code == 200


def test_a_tampered_form_key_is_told_not_swallowed(browser, frozen, a100, small_pool):
    response = browser.post("/leases/new/", form_data(a100, request_key="k" * 81))
    assert response.status_code == 200
    assert "Reload the form and send it again" in response.content.decode()
    assert not Lease.objects.exists()


def test_destructive_actions_ask_first(browser, frozen, alice, vision, a100, small_pool):
    """Release, resize, cancel, revoke a token, delete a webhook: each form asks (data-confirm,
    the page's dialog), says what will happen, and its button is not the primary blue."""
    import re

    from portal.tokens.services import token_create

    active = ask(alice, vision, a100, count=2)
    provisioning.provision_step(lease_id=active.pk)
    waiting = ask(alice, vision, a100, count=2, start_at=T0 + hours(24))
    token_create(user=alice, name="ci script")

    def form(page, action):
        found = re.search(rf'<form[^>]*action="[^"]*{action}"[^>]*>.*?</form>', page, re.S)
        assert found, action
        return found.group(0)

    page = browser.get(f"/leases/{active.pk}/").content.decode()
    release = form(page, "/release/")
    assert 'data-confirm="Release lease' in release and "2 × A100 test cards go back" in release
    assert "button--danger" in release and "button--secondary" not in release
    assert "data-confirm=" in form(page, "/resize/")
    assert "data-confirm=" in form(
        browser.get(f"/leases/{waiting.pk}/").content.decode(), "/cancel/"
    )
    revoke = form(browser.get("/accounts/profile/").content.decode(), "/revoke/")
    assert 'data-confirm="Revoke the token “ci script”' in revoke and "button--danger" in revoke
    assert 'id="confirm-dialog"' in page
