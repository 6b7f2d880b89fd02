"""A real OpenLDAP server (Debian's slapd) for the whole session, and the portal's LDAP
settings pointed at it; skipped with the reason where slapd or ldap-utils is missing."""

from __future__ import annotations

import ssl

import pytest

from portal.directory_map import parse_team_map
from tests.identity import slapd

TEAM_MAP = "gpu-vision=vision,gpu-vision-leads=vision:lead,gpu-nlp=nlp"


@pytest.fixture(scope="session")
def slapd_server(tmp_path_factory):
    reason = slapd.missing()
    if reason:
        pytest.skip(reason)
    server = slapd.start(tmp_path_factory.mktemp("slapd"))
    yield server
    server.stop()


@pytest.fixture
def directory(slapd_server, settings):
    """LDAP sign-in, groups and the sync configured as docs/operations.md shows for OpenLDAP,
    against the real slapd holding tests/identity/directory.ldif (loaded afresh)."""
    slapd_server.reload()
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "portal.ldap_backend.LDAPBackend",
    ]
    settings.LDAP_AUTH_URL = [slapd_server.url]
    settings.LDAP_AUTH_USE_TLS = False
    settings.LDAP_AUTH_TLS_ARGS = {
        "validate": ssl.CERT_REQUIRED,
        "ca_certs_file": slapd_server.ca_file,
    }
    settings.LDAP_AUTH_SEARCH_BASE = slapd.PEOPLE
    settings.LDAP_AUTH_OBJECT_CLASS = "inetOrgPerson"
    settings.LDAP_AUTH_USER_FIELDS = {
        "username": "uid",
        "first_name": "givenName",
        "last_name": "sn",
        "email": "mail",
    }
    settings.LDAP_AUTH_USER_LOOKUP_FIELDS = ("username",)
    settings.CARDPOOL_LDAP_FORMAT_USERNAME = "django_python3_ldap.utils.format_username_openldap"
    settings.LDAP_AUTH_FORMAT_USERNAME = "portal.auth_ldap.format_username"
    settings.LDAP_AUTH_CONNECTION_USERNAME = slapd.SERVICE_DN
    settings.LDAP_AUTH_CONNECTION_PASSWORD = slapd.SERVICE_PASSWORD
    settings.LDAP_AUTH_CONNECT_TIMEOUT = 5
    settings.LDAP_AUTH_RECEIVE_TIMEOUT = 5
    settings.LDAP_AUTH_POOL_ACTIVE = 1  # as portal/settings.py sets it
    settings.LDAP_AUTH_SYNC_USER_RELATIONS = "portal.auth_ldap.sync_user_relations"
    settings.CARDPOOL_LDAP = {
        "GROUP_SEARCH_BASE": slapd.GROUPS,
        "GROUP_FILTER": "(objectClass=groupOfNames)",
        "GROUP_MEMBER_ATTRIBUTE": "member",
        "GROUP_NAME_ATTRIBUTE": "cn",
        "DISABLED_FILTER": "(pwdAccountLockedTime=*)",
    }
    settings.CARDPOOL_DIRECTORY = {
        "TEAMS": parse_team_map(TEAM_MAP),
        "SYNC_SECONDS": 300,
        "LEAVER_LEASES": "end",
        "OIDC_GROUPS_CLAIM": "groups",
    }
    return slapd_server


@pytest.fixture
def en_client(client):
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    return client


def dn(uid: str) -> str:
    return f"uid={uid},{slapd.PEOPLE}"


def group(cn: str) -> str:
    return f"cn={cn},{slapd.GROUPS}"
