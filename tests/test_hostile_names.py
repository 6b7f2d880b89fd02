"""Names people type reach pages and charts escaped: no markup, no script."""

from datetime import timedelta

from leasing.lifecycle import provisioning
from leasing.lifecycle import requests as lease_requests
from tests.factories import CardModelFactory, make_node

HOSTILE = '<b>x</b><script>alert(1)</script><a href="https://evil.example">y</a>'


def test_hostile_team_and_model_names_are_escaped_in_pages_and_charts(
    client, alice, lena, fin, vision
):
    vision.name = HOSTILE
    vision.save()
    model = CardModelFactory(slug="hostile-model", name=HOSTILE)
    make_node(model, cards=2, domains=1, hostname="hostile")
    lease = lease_requests.lease_request(
        user=alice,
        team=vision,
        card_model=model,
        count=1,
        duration=timedelta(hours=2),
        description=HOSTILE,
    )
    provisioning.provision_step(lease_id=lease.pk)
    for user, url in (
        (alice, f"/leases/{lease.pk}/"),
        (alice, "/"),
        (lena, "/teams/vision/"),
        (fin, "/pool/"),
    ):
        client.force_login(user)
        page = client.get(url).content.decode()
        assert "<script>alert(1)</script>" not in page, url
        assert '<a href="https://evil.example">' not in page, url
        assert "<b>x</b>" not in page, url
        # Inside plotly's JSON, "<" is \u003c: plotly would render it as markup in a label.
        assert "\\u003cb\\u003ex" not in page, url
    client.force_login(lena)
    assert (
        "&lt;b&gt;x" in client.get("/teams/vision/").content.decode()
    )  # the chart's legend, escaped
