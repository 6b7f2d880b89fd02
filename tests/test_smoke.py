def test_login_page_renders(client, db):
    response = client.get("/accounts/login/")
    assert response.status_code == 200


def test_openapi_schema_and_docs_render(client, alice):
    client.force_login(alice)
    schema = client.get("/api/v1/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/leases/{id}/extend/" in schema.content
    assert client.get("/api/v1/docs/").status_code == 200


def test_docs_page_uses_local_assets_only(client, alice):
    client.force_login(alice)
    page = client.get("/api/v1/docs/").content.decode()
    assert "cdn" not in page.lower() and "//unpkg" not in page


def test_openapi_schema_is_valid_without_warnings(db, tmp_path):
    from django.core.management import call_command

    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml")
    )


def test_admin_pages_render_for_operators(client, db):
    from django.contrib import admin

    from tests.factories import UserFactory

    staff = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(staff)
    for model in admin.site._registry:
        url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        assert client.get(url).status_code == 200, url
