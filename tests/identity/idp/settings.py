"""A small OpenID Connect provider for the tests: its own Django project (django-oidc-provider)
in its own process, with its own SQLite file (IDP_DIR). Started by tests/identity/oidc.py."""

import os
from pathlib import Path

IDP_DIR = Path(os.environ["IDP_DIR"])
SECRET_KEY = os.environ.get("IDP_SECRET_KEY", "test-idp-only-" + "x" * 40)
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
SITE_URL = os.environ["IDP_URL"]
ROOT_URLCONF = "tests.identity.idp.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oidc_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": IDP_DIR / "idp.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
USE_TZ = True
LOGIN_URL = "/login/"
# The portal and the provider both run on 127.0.0.1: different ports share cookies, so
# the provider's cookies get names of their own.
SESSION_COOKIE_NAME = "idp_session"
CSRF_COOKIE_NAME = "idp_csrf"
OIDC_USERINFO = "tests.identity.idp.claims.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "tests.identity.idp.claims.GroupsClaims"
OIDC_IDTOKEN_INCLUDE_CLAIMS = True
LOGGING = {"version": 1, "disable_existing_loggers": False}
