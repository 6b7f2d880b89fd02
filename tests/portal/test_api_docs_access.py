"""The API schema and its docs page are for signed-in users (CARDPOOL_API_DOCS_PUBLIC opens them)."""

import re


def test_strangers_get_neither_schema_nor_docs(client, db):
    assert client.get("/api/v1/schema/").status_code == 401
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 302 and docs["Location"].startswith("/accounts/login/")
    assert client.get("/api/v1/docs/?script").status_code == 302


def test_signed_in_docs_page_has_no_inline_script_or_style(client, alice):
    client.force_login(alice)
    page = client.get("/api/v1/docs/").content.decode()
    assert "<style" not in page
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page)  # every script is a file
    script = client.get("/api/v1/docs/?script")
    assert script.status_code == 200 and "/api/v1/schema/" in script.content.decode()
