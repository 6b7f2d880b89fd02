def test_login_page_renders(client, db):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
