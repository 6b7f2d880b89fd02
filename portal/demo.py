"""Demo data: a small heterogeneous pool, two teams and the named users. Idempotent."""

from __future__ import annotations

from datetime import timedelta

from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from inventory.models import Card, CardModel, Node, Region
from portal.models import Department, Membership, Profile, Team

REGIONS = [
    # slug, name, kind, parent
    ("north-dc", "华北数据中心 North DC", "centre", None),
    ("beijing", "北京 Beijing", "province", "north-dc"),
    ("shanghai", "上海 Shanghai", "province", "north-dc"),
    ("shenzhen-edge", "深圳边缘 Shenzhen edge", "edge", "shanghai"),
]

# Electricity price per region (CNY/kWh): the task advisor shows and weighs the energy.
ENERGY_PRICES = {"beijing": "0.65", "shanghai": "0.72", "shenzhen-edge": "0.80"}

# The software installed on the nodes, per card model (older nodes run older CUDA).
SOFTWARE = {
    "a100-80g-sxm": {"cuda": "12.4"},
    "h800": {"cuda": "12.4"},
    "v100-32g": {"cuda": "11.8"},
    "t4": {"cuda": "11.8"},
    "ascend-910b": {"cann": "8.0.RC2"},
    "mlu370-x8": {"neuware": "3.10"},
    "dcu-k100": {"dtk": "24.04"},
    "metax-c500": {"maca": "2.24"},
    "rtx-4090": {"cuda": "12.4"},
    "kunlunxin-r200": {"xpu": "4.0"},
    "mtt-s4000": {"musa": "3.1"},
    "l40s": {"cuda": "12.4"},
}

# hostname, region, card model slug, cards, interconnect domains, network, Gbps
NODES = [
    ("bj-a100-01", "beijing", "a100-80g-sxm", 8, 1, "ib", 200),
    ("bj-a100-02", "beijing", "a100-80g-sxm", 8, 1, "ib", 200),
    ("bj-h800-01", "beijing", "h800", 8, 1, "ib", 400),
    ("bj-v100-01", "beijing", "v100-32g", 8, 2, "ib", 100),
    ("bj-t4-01", "beijing", "t4", 4, 4, "ethernet", 25),
    ("sh-910b-01", "shanghai", "ascend-910b", 8, 1, "roce", 200),
    ("sh-910b-02", "shanghai", "ascend-910b", 8, 1, "roce", 200),
    ("sh-mlu370-01", "shanghai", "mlu370-x8", 8, 4, "roce", 100),
    ("sh-k100-01", "shanghai", "dcu-k100", 8, 2, "roce", 100),
    ("sh-c500-01", "shanghai", "metax-c500", 8, 1, "roce", 100),
    ("sz-4090-01", "shenzhen-edge", "rtx-4090", 8, 8, "ethernet", 25),
    ("sz-r200-01", "shenzhen-edge", "kunlunxin-r200", 8, 2, "ethernet", 25),
    ("sz-s4000-01", "shenzhen-edge", "mtt-s4000", 8, 2, "ethernet", 25),
    ("sz-l40s-01", "shenzhen-edge", "l40s", 4, 4, "ethernet", 100),
]

USERS = [
    # username, email, first name, finance, operator
    ("alice", "alice@example.com", "Alice", False, False),
    ("lena", "lena@example.com", "Lena", False, False),
    ("bob", "bob@example.com", "Bob", False, False),
    ("chen", "chen@example.com", "Chen", False, False),
    ("fin", "fin@example.com", "Fin", True, False),
    ("ops", "ops@example.com", "Ops", False, True),
]

MEMBERSHIPS = [
    ("alice", "vision", "member"),
    ("lena", "vision", "lead"),
    ("bob", "nlp", "member"),
    ("chen", "vision", "member"),
]


@transaction.atomic
def seed_inventory() -> dict[str, int]:
    """Regions, nodes and cards; only card models from the catalogue are used."""
    created = {"regions": 0, "nodes": 0, "cards": 0}
    regions: dict[str, Region] = {}
    for slug, name, kind, parent in REGIONS:
        region, made = Region.objects.get_or_create(
            slug=slug,
            defaults={
                "name": name,
                "kind": kind,
                "parent": regions.get(parent),
                "energy_price_kwh": ENERGY_PRICES.get(slug),
            },
        )
        regions[slug] = region
        created["regions"] += made
    models = {m.slug: m for m in CardModel.objects.filter(slug__in={n[2] for n in NODES})}
    for hostname, region, model_slug, count, domains, network, gbps in NODES:
        model = models.get(model_slug)
        if model is None:
            continue  # catalogue without this model: skip rather than invent one
        node, made = Node.objects.get_or_create(
            hostname=hostname,
            defaults={
                "region": regions[region],
                "network_kind": network,
                "network_gbps": gbps,
                "cpu_cores": 128,
                "memory_gb": 1024,
                "labels": {"demo": "true"},
                "software_versions": SOFTWARE.get(model_slug, {}),
            },
        )
        created["nodes"] += made
        existing = set(node.cards.values_list("index", flat=True))
        per_domain = max(1, count // domains)
        new = [
            Card(
                node=node,
                card_model=model,
                index=i,
                uuid=f"{hostname}-card{i}",
                interconnect_domain=i // per_domain,
            )
            for i in range(count)
            if i not in existing
        ]
        Card.objects.bulk_create(new)
        created["cards"] += len(new)
    return created


@transaction.atomic
def seed_people() -> int:
    User = get_user_model()
    password = settings.CARDPOOL["DEMO_PASSWORD"]
    made_users = 0
    dept, _ = Department.objects.get_or_create(
        slug="research", defaults={"name": "研究院 Research"}
    )
    teams = {
        "vision": Team.objects.get_or_create(
            slug="vision", defaults={"name": "视觉组 Vision", "department": dept}
        )[0],
        "nlp": Team.objects.get_or_create(
            slug="nlp", defaults={"name": "NLP 组 NLP", "department": dept}
        )[0],
    }
    for username, email, first, finance, operator in USERS:
        user, made = User.objects.get_or_create(
            username=username, defaults={"email": email, "first_name": first}
        )
        if made:
            user.set_password(password)
            user.is_staff = operator
            user.is_superuser = operator
            user.save()
            made_users += 1
        EmailAddress.objects.get_or_create(
            user=user, email=email, defaults={"verified": True, "primary": True}
        )
        Profile.objects.update_or_create(
            user=user, defaults={"is_finance": finance, "is_operator": operator}
        )
    for username, team, role in MEMBERSHIPS:
        Membership.objects.get_or_create(
            user=User.objects.get(username=username), team=teams[team], defaults={"role": role}
        )
    return made_users


def seed_quotas() -> int:
    """Quotas for the demo teams and a member limit for alice; only where none exist."""
    from leasing.models import MemberLimit, Quota

    made = 0
    rules = [
        (
            "vision",
            "a100-80g-sxm",
            {"max_concurrent_cards": 12, "card_hours_per_month": 2000, "max_lease_hours": 72},
        ),
        ("vision", None, {"card_hours_per_month": 5000, "money_per_month": 200000}),
        (
            "nlp",
            "ascend-910b",
            {"max_concurrent_cards": 16, "card_hours_per_month": 4000, "max_lease_hours": 168},
        ),
    ]
    for team_slug, model_slug, limits in rules:
        team = Team.objects.get(slug=team_slug)
        model = CardModel.objects.filter(slug=model_slug).first() if model_slug else None
        if model_slug and model is None:
            continue
        _, created = Quota.objects.get_or_create(team=team, card_model=model, defaults=limits)
        made += created
    alice = Membership.objects.get(user__username="alice", team__slug="vision")
    _, created = MemberLimit.objects.get_or_create(
        membership=alice,
        card_model=None,
        defaults={"max_concurrent_cards": 4, "max_lease_hours": 48},
    )
    made += created
    # chen's requests longer than a day wait for lena: the demo's approval to show.
    chen = Membership.objects.get(user__username="chen", team__slug="vision")
    _, created = MemberLimit.objects.get_or_create(
        membership=chen, card_model=None, defaults={"max_lease_hours": 24}
    )
    made += created
    Team.objects.filter(slug="nlp").update(allow_borrowing=True)
    return made


def seed_leases() -> int:
    """A few leases so the pages have something to show; only on the first run."""
    from django.utils import timezone

    from leasing.lifecycle.requests import lease_request
    from leasing.models import Lease

    User = get_user_model()
    if Lease.objects.exclude(description="demo history").exists():
        return 0
    alice, bob, chen, lena = (
        User.objects.get(username=name) for name in ("alice", "bob", "chen", "lena")
    )
    vision, nlp = Team.objects.get(slug="vision"), Team.objects.get(slug="nlp")
    tomorrow_9 = timezone.localtime().replace(hour=9, minute=0, second=0, microsecond=0)
    tomorrow_9 += timedelta(days=1)
    wanted = [
        # alice holds 2 of her 4 cards: the first thing she asks for is granted at once.
        (alice, vision, "a100-80g-sxm", 2, timedelta(hours=6), "training", None),
        (bob, nlp, "ascend-910b", 8, timedelta(hours=12), "training", None),
        (bob, nlp, "rtx-4090", 2, timedelta(hours=3), "inference", None),
        # two days is over chen's one-day limit: it waits for lena's approval.
        (chen, vision, "a100-80g-sxm", 2, timedelta(hours=48), "training", None),
        # a reservation, so the calendar and the pool timeline show one in its slot.
        (lena, vision, "h800", 4, timedelta(hours=3), "training", tomorrow_9),
        # and bob waits for all 8 H800 for two days from tomorrow 10:00, behind her: the
        # timeline and the calendar show his planned cards, his lease says what is in the way.
        (bob, nlp, "h800", 8, timedelta(hours=48), "training", tomorrow_9 + timedelta(hours=1)),
    ]
    made = 0
    for user, team, slug, count, duration, purpose, start_at in wanted:
        model = CardModel.objects.filter(slug=slug).first()
        if model is not None and model.cards.exists():
            lease_request(
                user=user,
                team=team,
                card_model=model,
                count=count,
                duration=duration,
                purpose=purpose,
                start_at=start_at,
            )
            made += 1
    return made


def seed_history(days: int = 21) -> int:
    """Ended leases over the past weeks, with their usage, so reports and charts have data.

    Only on the first run. Each day one lease per (user, model) below, on the first cards of
    the model's first node, at a different hour per user: past periods never overlap.
    """
    from django.utils import timezone

    from leasing.billing import usage
    from leasing.choices import EndReason, LeaseStatus
    from leasing.models import Allocation, Lease, LeaseEvent

    if Lease.objects.filter(status=LeaseStatus.ENDED).exists():
        return 0
    User = get_user_model()
    plan = [
        ("alice", "vision", "a100-80g-sxm", 2, 9, 5),
        ("lena", "vision", "h800", 4, 10, 3),
        ("bob", "nlp", "ascend-910b", 8, 8, 7),
        ("bob", "nlp", "rtx-4090", 1, 14, 2),
    ]
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    made = 0
    with transaction.atomic():
        for username, team_slug, slug, count, hour, hours in plan:
            model = CardModel.objects.filter(slug=slug).first()
            node = (
                Node.objects.filter(cards__card_model=model).order_by("hostname").first()
                if model
                else None
            )
            if node is None:
                continue
            cards = list(node.cards.filter(card_model=model).order_by("index")[:count])
            user, team = User.objects.get(username=username), Team.objects.get(slug=team_slug)
            for back in range(days, 0, -1):
                if back % 7 in (0, 6):
                    continue  # quieter weekends
                start = today - timedelta(days=back) + timedelta(hours=hour)
                end = start + timedelta(hours=hours + back % 3)
                submitted = start - timedelta(minutes=back % 4 * 5)
                lease = Lease.objects.create(
                    user=user,
                    team=team,
                    card_model=model,
                    count=len(cards),
                    duration=end - start,
                    start_at=start,
                    end_at=end,
                    status=LeaseStatus.ENDED,
                    end_reason=EndReason.EXPIRED,
                    submitted_at=submitted,
                    activated_at=start,
                    ended_at=end,
                    status_changed_at=end,
                    purpose="training",
                    description="demo history",
                )
                Allocation.objects.bulk_create(
                    Allocation(card=c, lease=lease, start_at=start, end_at=end) for c in cards
                )
                LeaseEvent.objects.bulk_create(
                    [
                        LeaseEvent(lease=lease, at=submitted, kind="requested", to_status="queued"),
                        LeaseEvent(
                            lease=lease,
                            at=start,
                            kind="active",
                            from_status="provisioning",
                            to_status="active",
                        ),
                        LeaseEvent(
                            lease=lease,
                            at=end,
                            kind="ended",
                            from_status="releasing",
                            to_status="ended",
                        ),
                    ]
                )
                made += 1
    for lease_id in Lease.objects.filter(description="demo history").values_list("pk", flat=True):
        usage.usage_record_lease(lease_id)
    return made
