"""``{% money amount %}``: an amount in the configured currency (``billing.prices.money``);
``{% currency %}``: the code alone, for column headings. Templates write no currency sign."""

from django import template

from leasing.billing import prices

register = template.Library()


@register.simple_tag
def money(amount, places: int = 2) -> str:
    return prices.money(amount, places)


@register.simple_tag
def currency() -> str:
    return prices.currency()
