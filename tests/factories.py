"""factory_boy factories shared by the whole suite."""

from __future__ import annotations

from decimal import Decimal

import factory
from django.contrib.auth import get_user_model

from inventory.models import Card, CardModel, InterconnectKind, Node, Region, StackFamily, Vendor
from portal.models import Membership, Profile, Team


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.django.Password("pw-for-tests")

    @factory.post_generation
    def profile(self, create, extracted, **kwargs):
        if create:
            Profile.objects.get_or_create(user=self, defaults=kwargs)


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team{n}")
    name = factory.LazyAttribute(lambda t: t.slug.title())


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Membership.Role.MEMBER


class RegionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Region
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"region{n}")
    name = factory.LazyAttribute(lambda r: r.slug.title())


class CardModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CardModel
        django_get_or_create = ("slug",)

    vendor = Vendor.NVIDIA
    slug = factory.Sequence(lambda n: f"model{n}")
    name = factory.LazyAttribute(lambda m: m.slug.upper())
    family = "test-family"
    memory_gb = Decimal("80")
    memory_bandwidth_gbs = 2039
    bf16_tflops = Decimal("312")
    fp16_tflops = Decimal("312")
    interconnect_kind = InterconnectKind.NVLINK
    interconnect_gbs = 600
    stack_family = StackFamily.CUDA
    price_per_hour = Decimal("10.00")


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    hostname = factory.Sequence(lambda n: f"node{n:03d}")
    region = factory.SubFactory(RegionFactory, slug="test-region")
    # As if its agent had reported it can run everything (leasing.workbench.offers); a test
    # of a node with no agent passes session_offers={}.
    session_offers = factory.LazyFunction(
        lambda: {"can": ["desktop", "fence", "jupyterlab", "keys", "terminal"], "gl": "llvmpipe"}
    )


class CardFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Card

    node = factory.SubFactory(NodeFactory)
    card_model = factory.SubFactory(CardModelFactory)
    index = factory.Sequence(lambda n: n)


def make_node(card_model: CardModel, cards: int = 8, domains: int = 1, **node_kwargs) -> Node:
    """A node with *cards* cards of one model, split evenly into *domains* interconnect islands."""
    node = NodeFactory(**node_kwargs)
    per_domain = max(1, cards // domains)
    Card.objects.bulk_create(
        Card(
            node=node,
            card_model=card_model,
            index=i,
            uuid=f"{node.hostname}-{i}",
            interconnect_domain=i // per_domain,
        )
        for i in range(cards)
    )
    return node
