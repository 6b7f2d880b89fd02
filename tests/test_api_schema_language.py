"""The API schema in the language asked for (issue #32): the English schema holds no Chinese
description, the Chinese one is worded in Chinese (descriptions are catalogue strings,
worded when the schema is made, never frozen at import in the site's language)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
# Proper names and data the schema may hold in Chinese: the chat products' names.
ALLOWED = re.compile(r"\((企业微信|钉钉|飞书)\)")


def _descriptions(node, path=""):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("description", "title", "summary") and isinstance(value, str):
                yield f"{path}/{key}", value
            else:
                yield from _descriptions(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _descriptions(value, f"{path}/{i}")


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["accept-language", "lang"])
def test_the_english_schema_has_no_chinese(alice, settings, how):
    settings.LANGUAGE_CODE = "zh-hans"  # the site's language is not the one asked for
    client = Client(HTTP_ACCEPT_LANGUAGE="en" if how == "accept-language" else "zh-hans")
    client.force_login(alice)
    url = "/api/v1/schema/?format=json" + ("&lang=en" if how == "lang" else "")
    schema = client.get(url).json()
    chinese = [
        f"{where}: {text[:60]}"
        for where, text in _descriptions(schema)
        if CJK.search(ALLOWED.sub("", text))
    ]
    assert chinese == [], "\n".join(chinese)


@pytest.mark.django_db
def test_the_chinese_schema_is_in_chinese(alice):
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-hans")
    client.force_login(alice)
    schema = client.get("/api/v1/schema/?format=json&lang=zh-hans").json()
    texts = [text for _where, text in _descriptions(schema)]
    assert sum(1 for t in texts if CJK.search(t)) > 10
