"""Set the provider up (database, signing key, a client for the portal, the people) and
serve it: ``python -m tests.identity.idp.serve <port> <redirect uri>``.

People: carol (password carol-pw) in groups gpu-vision and gpu-nlp."""

import sys

import django


def main() -> None:
    port, redirect_uri = sys.argv[1], sys.argv[2]
    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from oidc_provider.models import Client, ResponseType

    call_command("migrate", verbosity=0)
    call_command("creatersakey", stdout=open("/dev/null", "w"))  # noqa: SIM115
    client = Client.objects.create(
        name="Cardpool",
        client_type="confidential",
        client_id="cardpool",
        client_secret="cardpool-secret",
        jwt_alg="RS256",
        require_consent=True,
        reuse_consent=False,
    )
    client.redirect_uris = [redirect_uri]
    client.scope = ["openid", "profile", "email", "groups"]
    client.save()
    client.response_types.add(ResponseType.objects.get(value="code"))
    carol = User.objects.create_user(
        "carol", "carol@idp.example", "carol-pw", first_name="Carol", last_name="Sun"
    )
    for name in ("gpu-vision", "gpu-nlp"):
        carol.groups.add(Group.objects.create(name=name))
    call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, use_threading=True)


if __name__ == "__main__":
    main()
