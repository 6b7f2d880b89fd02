"""The API schema and its docs page are for signed-in users (CARDPOOL_API_DOCS_PUBLIC opens them)."""

import re


def test_strangers_get_neither_schema_nor_docs(client, db):
    assert client.get("/api/v1/schema/").status_code == 401
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 302 and docs["Location"].startswith("/accounts/login/")


def test_signed_in_docs_page_has_no_inline_script_or_style(client, alice):
    client.force_login(alice)
    page = client.get("/api/v1/docs/").content.decode()
    assert "<style" not in page
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page)  # every script is a file
    assert 'spec-url="/api/v1/schema/"' in page  # Redoc reads the schema itself
    assert "googleapis" not in page  # no web fonts from outside


def test_only_the_docs_page_relaxes_the_policy_and_only_for_styles_and_workers(client, alice):
    """Redoc writes <style> elements and style attributes and builds its search worker from a
    blob: address: that view's policy allows inline styles and blob: workers, never inline
    scripts; every other page keeps the site-wide policy."""
    client.force_login(alice)

    def directives(url):
        policy = client.get(url)["Content-Security-Policy"]
        return dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())

    docs = directives("/api/v1/docs/")
    assert docs["style-src"] == "'self' 'unsafe-inline'"
    assert docs["worker-src"] == "blob:"
    assert docs["script-src"] == "'self'" and docs["default-src"] == "'self'"
    for url in ("/", "/pool/", "/api/v1/schema/"):
        other = directives(url)
        assert other["style-src"] == "'self'" and "worker-src" not in other, url
