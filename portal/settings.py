"""Cardpool settings, read from the environment.

Every knob is documented in docs/operations.md. Helpers fail loudly on bad values so
that a typo in production stops the process instead of silently falling back. One file of
over 500 lines on purpose: every setting in one place, in the order of docs/operations.md.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from portal import directory_map
from portal.secret_key import checked_secret_key
from portal.session_hosts import cookie_names, session_allowed_hosts

BASE_DIR = Path(__file__).resolve().parent.parent


def env(name: str, default: str | None = None) -> str | None:
    """Read NAME, or the contents of the file named by NAME_FILE (for secrets)."""
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_name!r} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false)")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from exc


def env_list(name: str, default: str = "") -> list[str]:
    raw = os.environ.get(name, default)
    return [item.strip() for item in raw.split(",") if item.strip()]


DEBUG = env_bool("CARDPOOL_DEBUG", False)
VAR_DIR = Path(env("CARDPOOL_VAR_DIR", str(BASE_DIR / "var")))
(VAR_DIR / "static").mkdir(parents=True, exist_ok=True)

# Outside debugging a missing, published or short key stops the start (portal/secret_key.py).
SECRET_KEY = checked_secret_key(env("CARDPOOL_SECRET_KEY"), DEBUG)

ALLOWED_HOSTS = env_list("CARDPOOL_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]" if DEBUG else "")
CSRF_TRUSTED_ORIGINS = env_list("CARDPOOL_CSRF_TRUSTED_ORIGINS")
SITE_URL = env("CARDPOOL_SITE_URL", "http://127.0.0.1:8000").rstrip("/")
# Webhooks may reach loopback, private and link-local addresses only when this is true
# (self-hosted receivers); otherwise a user could aim the workers inside the network (SSRF).
CARDPOOL_WEBHOOK_ALLOW_PRIVATE = env_bool("CARDPOOL_WEBHOOK_ALLOW_PRIVATE", False)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django.contrib.postgres",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "csp",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "portal.tokens",
    "portal",
    "inventory",
    "leasing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "portal.middleware.DatabaseUnavailableMiddleware",
    "portal.session_hosts.SessionHostMiddleware",  # a session's origin: only its own paths
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "portal.input.RefuseNulMiddleware",  # NUL in any input: 404/400, never a DataError
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "portal.middleware.UserTimezoneMiddleware",
    "portal.middleware.TeamlessGateMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.site",
                "leasing.context_processors.notifications_unread",
                "leasing.context_processors.alerts_open",
                "leasing.context_processors.broker_status",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
# SQLite by default; DATABASE_URL=postgres://... switches to PostgreSQL.
DATABASE_URL = env("DATABASE_URL", f"sqlite:///{VAR_DIR / 'cardpool.sqlite3'}")
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60), conn_health_checks=True
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE transactions serialize writers: two requests can never both read
    # "card free" and then both book it (DESIGN.md, allocations).
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth (docs/operations.md, "Sign-in: email, OIDC, LDAP, API tokens") ---------------
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "dashboard"
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
# Self sign-up is closed unless CARDPOOL_ALLOW_SIGNUP is on (accounts come from an operator's
# or lead's invitation, SSO or LDAP); when it is open, addresses must be verified by default.
ACCOUNT_SIGNUP_ENABLED = env_bool("CARDPOOL_ALLOW_SIGNUP", False)
ACCOUNT_EMAIL_VERIFICATION = env(
    "CARDPOOL_EMAIL_VERIFICATION", "mandatory" if ACCOUNT_SIGNUP_ENABLED else "optional"
)
if ACCOUNT_EMAIL_VERIFICATION not in {"mandatory", "optional", "none"}:
    raise ImproperlyConfigured(
        f"CARDPOOL_EMAIL_VERIFICATION={ACCOUNT_EMAIL_VERIFICATION!r}: use mandatory, optional or none"
    )
ACCOUNT_EMAIL_SUBJECT_PREFIX = "[Cardpool] "
ACCOUNT_LOGOUT_ON_GET = False
ACCOUNT_LOGIN_ON_PASSWORD_RESET = False
# Failed sign-ins: 10 a minute per address, 5 per 5 minutes per account (allauth's limits).
ACCOUNT_RATE_LIMITS = {"login_failed": env("CARDPOOL_LOGIN_FAILED_RATE", "10/m/ip,5/5m/key")}
# Rate limits count per client address: X-Forwarded-For is believed only from our own proxies.
ALLAUTH_TRUSTED_PROXY_COUNT = env_int(
    "CARDPOOL_TRUSTED_PROXIES", 1 if env_bool("CARDPOOL_BEHIND_TLS_PROXY", False) else 0
)
# --- Doors: one lockout, a shared cache, token revocation (docs/operations.md, "Doors") -------
# The account adapter counts failed sign-ins per account for the login page and the token
# endpoint alike (portal/auth_account.py).
ACCOUNT_ADAPTER = "portal.auth_account.AccountAdapter"
ACCOUNT_PREVENT_ENUMERATION = True
# Rate limits, lockouts and throttles live in the cache, so it must be one for every process:
# Redis when CARDPOOL_CACHE_URL (or else a redis:// CELERY_BROKER_URL) names one, otherwise a
# table in the database (Django's DatabaseCache: its add() is atomic through the primary key,
# which allauth's lock needs; FileBasedCache's is not). `migrate` creates the table.
_CACHE_URL = env("CARDPOOL_CACHE_URL") or ""
if not _CACHE_URL and (env("CELERY_BROKER_URL") or "").startswith(("redis://", "rediss://")):
    _CACHE_URL = env("CELERY_BROKER_URL")
if _CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": _CACHE_URL,
            "KEY_PREFIX": "cardpool",
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }
elif _CACHE_URL in ("", "db"):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "cardpool_cache",
        }
    }
else:
    raise ImproperlyConfigured(f"CARDPOOL_CACHE_URL={_CACHE_URL!r}: use redis://… or db")
# Changing or resetting a password revokes the person's API tokens (sessions end anyway).
CARDPOOL_REVOKE_TOKENS_ON_PASSWORD_CHANGE = env_bool(
    "CARDPOOL_REVOKE_TOKENS_ON_PASSWORD_CHANGE", True
)
# "Send a test" on a webhook: this many per user in a sliding window (5/h, 10/15m).
CARDPOOL_WEBHOOK_TEST_RATE = env("CARDPOOL_WEBHOOK_TEST_RATE", "5/h")
_amount, _slash, _period = CARDPOOL_WEBHOOK_TEST_RATE.partition("/")
if not (_amount.isascii() and _amount.isdigit() and _period[-1:] in ("s", "m", "h", "d")):
    raise ImproperlyConfigured(
        f"CARDPOOL_WEBHOOK_TEST_RATE={CARDPOOL_WEBHOOK_TEST_RATE!r}: use 5/h"
    )

# Single sign-on through OpenID Connect: on when CARDPOOL_OIDC_SERVER_URL is set.
SOCIALACCOUNT_ADAPTER = "portal.auth_sso.SocialAccountAdapter"
SOCIALACCOUNT_PROVIDERS: dict = {"openid_connect": {"OAUTH_PKCE_ENABLED": True, "APPS": []}}
CARDPOOL_OIDC_ALLOW_SIGNUP = env_bool("CARDPOOL_OIDC_ALLOW_SIGNUP", True)
SOCIALACCOUNT_EMAIL_AUTHENTICATION = env_bool("CARDPOOL_OIDC_EMAIL_AUTHENTICATION", False)
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = SOCIALACCOUNT_EMAIL_AUTHENTICATION
if env("CARDPOOL_OIDC_SERVER_URL"):
    _oidc_missing = [
        name for name in ("CARDPOOL_OIDC_CLIENT_ID", "CARDPOOL_OIDC_CLIENT_SECRET") if not env(name)
    ]
    if _oidc_missing:
        raise ImproperlyConfigured(
            f"CARDPOOL_OIDC_SERVER_URL is set, so {' and '.join(_oidc_missing)} must be too"
        )
    SOCIALACCOUNT_PROVIDERS["openid_connect"]["APPS"].append(
        {
            "provider_id": env("CARDPOOL_OIDC_PROVIDER_ID", "sso"),
            "name": env("CARDPOOL_OIDC_PROVIDER_NAME", "SSO"),
            "client_id": env("CARDPOOL_OIDC_CLIENT_ID"),
            "secret": env("CARDPOOL_OIDC_CLIENT_SECRET"),
            "settings": {
                "server_url": env("CARDPOOL_OIDC_SERVER_URL"),
                "scope": env_list("CARDPOOL_OIDC_SCOPES", "openid,profile,email"),
            },
        }
    )

# LDAP: on when CARDPOOL_LDAP_URL is set (django-python3-ldap; see portal/auth_ldap.py).
if env("CARDPOOL_LDAP_URL"):
    from portal import auth_ldap

    AUTHENTICATION_BACKENDS.append(auth_ldap.BACKEND)
    INSTALLED_APPS.append("django_python3_ldap")  # its ldap_sync_users command
    LDAP_AUTH_URL = env_list("CARDPOOL_LDAP_URL")
    LDAP_AUTH_USE_TLS = env_bool("CARDPOOL_LDAP_START_TLS", False)
    LDAP_AUTH_SEARCH_BASE = env("CARDPOOL_LDAP_SEARCH_BASE", "ou=people,dc=example,dc=com")
    LDAP_AUTH_OBJECT_CLASS = env("CARDPOOL_LDAP_OBJECT_CLASS", "inetOrgPerson")
    LDAP_AUTH_USER_FIELDS = auth_ldap.parse_user_fields(
        env(
            "CARDPOOL_LDAP_USER_FIELDS",
            "username=uid,first_name=givenName,last_name=sn,email=mail",
        )
    )
    LDAP_AUTH_USER_LOOKUP_FIELDS = ("username",)
    # The site's format (CARDPOOL_LDAP_USERNAME_FORMAT) behind one that lets the service
    # account be a full DN (cn=cardpool,ou=services,…) wherever it sits.
    CARDPOOL_LDAP_FORMAT_USERNAME = auth_ldap.username_format(
        env("CARDPOOL_LDAP_USERNAME_FORMAT", "openldap")
    )
    LDAP_AUTH_FORMAT_USERNAME = "portal.auth_ldap.format_username"
    # StartTLS checks the server's certificate: against CARDPOOL_LDAP_CA_FILE, else the
    # system's CAs (ldap3's default is not to check at all).
    LDAP_AUTH_TLS_ARGS = {"validate": ssl.CERT_REQUIRED}
    if env("CARDPOOL_LDAP_CA_FILE"):
        LDAP_AUTH_TLS_ARGS["ca_certs_file"] = env("CARDPOOL_LDAP_CA_FILE")
    LDAP_AUTH_ACTIVE_DIRECTORY_DOMAIN = env("CARDPOOL_LDAP_DOMAIN")
    LDAP_AUTH_CONNECTION_USERNAME = env("CARDPOOL_LDAP_BIND_USER")
    LDAP_AUTH_CONNECTION_PASSWORD = env("CARDPOOL_LDAP_BIND_PASSWORD")
    LDAP_AUTH_CONNECT_TIMEOUT = env_int("CARDPOOL_LDAP_TIMEOUT", 10)
    LDAP_AUTH_RECEIVE_TIMEOUT = LDAP_AUTH_CONNECT_TIMEOUT
    # Try each server once, then give up: the library's default (True) cycles through the
    # pool for ever while every server is down, so a sign-in — or the sync — never returns.
    LDAP_AUTH_POOL_ACTIVE = 1
    LDAP_AUTH_SYNC_USER_RELATIONS = "portal.auth_ldap.sync_user_relations"

# Groups (for teams from the directory) and disabled accounts (leavers), read by LDAP sign-in
# and the periodic sync (portal/directory.py, leasing/directory/).
CARDPOOL_LDAP = {
    "GROUP_SEARCH_BASE": env("CARDPOOL_LDAP_GROUP_SEARCH_BASE", ""),
    "GROUP_FILTER": env("CARDPOOL_LDAP_GROUP_FILTER", "(objectClass=groupOfNames)"),
    # member (groupOfNames, AD: holds DNs) or memberUid (posixGroup: holds uids).
    "GROUP_MEMBER_ATTRIBUTE": env("CARDPOOL_LDAP_GROUP_MEMBER_ATTRIBUTE", "member"),
    "GROUP_NAME_ATTRIBUTE": env("CARDPOOL_LDAP_GROUP_NAME_ATTRIBUTE", "cn"),
    # People this filter matches count as disabled (OpenLDAP ppolicy: (pwdAccountLockedTime=*);
    # AD: (userAccountControl:1.2.840.113556.1.4.803:=2)).
    "DISABLED_FILTER": env("CARDPOOL_LDAP_DISABLED_FILTER", ""),
}

# Teams from directory groups (leasing/directory/; docs/operations.md, "Teams from the
# directory"): CARDPOOL_DIRECTORY_TEAMS maps LDAP group names or OIDC groups claim values to
# teams and roles, "gpu-vision=vision,gpu-vision-leads=vision:lead"; empty: teams by hand only.
CARDPOOL_DIRECTORY = {
    "TEAMS": directory_map.parse_team_map(env("CARDPOOL_DIRECTORY_TEAMS", "") or ""),
    # The periodic sync of LDAP people and groups (seconds; 0: off).
    "SYNC_SECONDS": env_int("CARDPOOL_DIRECTORY_SYNC_SECONDS", 300),
    # A leaver's running leases: "end" them, or pass them to the team's "lead".
    "LEAVER_LEASES": directory_map.leaver_rule(env("CARDPOOL_LEAVER_LEASES", "end") or "end"),
    "OIDC_GROUPS_CLAIM": env("CARDPOOL_OIDC_GROUPS_CLAIM", "groups"),
}

# Tokens that POST /api/v1/auth/token/ hands out expire after this many days (0: never).
CARDPOOL_API_LOGIN_TOKEN_DAYS = env_int("CARDPOOL_API_LOGIN_TOKEN_DAYS", 30)

# --- i18n / time ----------------------------------------------------------------------
LANGUAGE_CODE = env("CARDPOOL_LANGUAGE", "zh-hans")
LANGUAGES = [("zh-hans", "简体中文"), ("en", "English")]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_I18N = True
USE_TZ = True
TIME_ZONE = env("CARDPOOL_TIME_ZONE", "Asia/Shanghai")
# The currency every price and cost is in (ISO 4217): named in reports, exports, statements.
CARDPOOL_CURRENCY = env("CARDPOOL_CURRENCY", "CNY")
if not (len(CARDPOOL_CURRENCY) == 3 and CARDPOOL_CURRENCY.isalpha()):
    raise ImproperlyConfigured(f"CARDPOOL_CURRENCY={CARDPOOL_CURRENCY!r}: use a code like CNY")

# --- Static files: everything served by the portal itself, no CDN ----------------------
STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "portal.staticfinders.PlotlyFinder",  # vendor/plotly.css, from the vendored plotly.js bundle
    "portal.staticfinders.RedocFinder",  # vendor/redoc.standalone.js: Redoc, nothing from outside
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = DEBUG

# --- REST API -------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.tokens.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Throttled views name their scope; the token endpoint guards against password guessing.
    "DEFAULT_THROTTLE_RATES": {
        "auth-token": env("CARDPOOL_TOKEN_RATE", "10/min"),
        "telemetry": env("CARDPOOL_TELEMETRY_RATE", "120/min"),
    },
    "NUM_PROXIES": ALLAUTH_TRUSTED_PROXY_COUNT,
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "portal.api_permissions.SeesPool",  # nothing of the pool for someone in no team
    ],
    # JSON nesting is bounded before parsing (portal/input.py): too deep is a 400, not a 500.
    "DEFAULT_PARSER_CLASSES": [
        "portal.input.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "portal.pagination.Pagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.exception_handler",
}
CARDPOOL_API_DOCS_PUBLIC = env_bool("CARDPOOL_API_DOCS_PUBLIC", False)
SPECTACULAR_SETTINGS = {
    "TITLE": "Cardpool API",
    "DESCRIPTION": "Lease GPU and accelerator cards from a shared pool.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # /api/v1/schema/ and /api/v1/docs/: signed-in users (session or token) unless this is on.
    "SERVE_PERMISSIONS": [
        "rest_framework.permissions.AllowAny"
        if CARDPOOL_API_DOCS_PUBLIC
        else "rest_framework.permissions.IsAuthenticated"
    ],
    # The docs page is Redoc, served from drf-spectacular-sidecar's bundle (portal/urls.py).
    "REDOC_DIST": "SIDECAR",
    # One schema name per choice set shared by several serializers.
    "ENUM_NAME_OVERRIDES": {
        "InterconnectEnum": "inventory.models.InterconnectKind",
        "VendorEnum": "inventory.models.Vendor",
        "PrecisionEnum": "inventory.models.Precision",
        "AlertKindEnum": "leasing.choices.AlertKind",
        "AlertSeverityEnum": "leasing.choices.AlertSeverity",
        "AlertStatusEnum": "leasing.choices.AlertStatus",
        "NetworkEnum": "inventory.models.Node.Network",
        "StackEnum": "inventory.models.StackFamily",
    },
}

# --- Celery ---------------------------------------------------------------------------
# A broker that needs no server by default (kombu's filesystem transport, with the atomic
# writes of portal/celery_broker.py: kombu's own lets a consumer read a half-written message);
# CELERY_BROKER_URL=redis://... in production.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", "filesystem://localhost/")
BROKER_DIR = VAR_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("in", "processed", "control", "rejected"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT = "portal.celery_broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "in"),
        "data_folder_out": str(BROKER_DIR / "in"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }
    CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = (
    False  # never eager outside unit tests (tests call task functions directly)
)
CELERY_TIMEZONE = TIME_ZONE
# Task modules live in the leasing packages; each task's name is pinned to the one it had
# before the move (``leasing.tasks.tick`` …), and callers send work by that name.
CELERY_IMPORTS = (
    "leasing.lifecycle.tasks",
    "leasing.notify.tasks",
    "leasing.billing.tasks",
    "leasing.health.tasks",
    "leasing.directory.tasks",
)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A down broker must fail a publish fast (leasing.enqueue logs it; the sweeps re-find the
# work): one quick retry (a pooled connection that died with a Redis restart), short timeouts.
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Keep a worker's database connection between tasks instead of opening one per task (Celery's
# Django fixup closes it after every task when this is unset: two new PostgreSQL backends per
# lease, measured at ~20 ms of CPU per request in docs/performance.md). portal/celery.py still
# drops a connection that errored or outlived DB_CONN_MAX_AGE before each task. 0: close
# after every task.
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 1000)


# --- Slurm backend (docs/operations.md, "Slurm backend") --------------------------------
def _slurm_gres_types(raw: str) -> dict[str, str]:
    """``a100-80g-sxm=a100,h800=h800`` (card model slug=GRES type); fails loudly when malformed."""
    pairs = {}
    for item in (part.strip() for part in raw.split(",")):
        slug, sep, gres = item.partition("=")
        if item and (not sep or not slug.strip() or not gres.strip()):
            raise ImproperlyConfigured(
                f"CARDPOOL_SLURM_GRES_TYPES: {item!r} is not card-model-slug=gres-type"
            )
        if item:
            pairs[slug.strip()] = gres.strip()
    return pairs


CARDPOOL_SLURM = {
    # Where salloc/squeue/scontrol/scancel live ("" = on PATH) and the slurm.conf to use.
    "BIN_DIR": env("CARDPOOL_SLURM_BIN_DIR", ""),
    "CONF": env("CARDPOOL_SLURM_CONF", ""),
    # How the worker runs salloc as the lease holder: sudo (sudo -n -u USER), runuser (root),
    # uid (root: salloc --uid) or none (everything as the worker's own account).
    "RUN_AS": env("CARDPOOL_SLURM_RUN_AS", "sudo"),
    "IMMEDIATE_SECONDS": env_int("CARDPOOL_SLURM_IMMEDIATE_SECONDS", 5),
    "COMMAND_TIMEOUT": env_int("CARDPOOL_SLURM_COMMAND_TIMEOUT", 30),
    "JOB_PREFIX": env("CARDPOOL_SLURM_JOB_PREFIX", "cardpool-"),
    "GRES_NAME": env("CARDPOOL_SLURM_GRES_NAME", "gpu"),
    # Card model slug -> GRES type, e.g. "a100-80g-sxm=a100,h800=h800" (node labels
    # slurm:gres:<slug>, written by sync_slurm, win over it).
    "GRES_TYPES": _slurm_gres_types(env("CARDPOOL_SLURM_GRES_TYPES", "") or ""),
    "PARTITION": env("CARDPOOL_SLURM_PARTITION", ""),
    "ACCOUNT": env("CARDPOOL_SLURM_ACCOUNT", ""),
    # Slurm's time limit runs this long past the lease's end: a backstop behind Cardpool's expiry.
    "GRACE_MINUTES": env_int("CARDPOOL_SLURM_GRACE_MINUTES", 2),
    # Region of nodes sync_slurm creates.
    "REGION": env("CARDPOOL_SLURM_REGION", "slurm"),
    # Seconds between reconciliations of active leases with Slurm's jobs.
    "RECONCILE_SECONDS": env_int("CARDPOOL_SLURM_RECONCILE_SECONDS", 60),
}


# --- Kubernetes backend (docs/operations.md, "Kubernetes backend") ---------------------
def _pairs(name: str, what: str) -> dict[str, str]:
    """``key=value,key=value`` from the environment; fails loudly when malformed."""
    pairs = {}
    for item in (part.strip() for part in (env(name, "") or "").split(",")):
        key, sep, value = item.partition("=")
        if item and (not sep or not key.strip() or not value.strip()):
            raise ImproperlyConfigured(f"{name}: {item!r} is not {what}")
        if item:
            pairs[key.strip()] = value.strip()
    return pairs


CARDPOOL_KUBERNETES = {
    # A kubeconfig file ("" = $KUBECONFIG / ~/.kube/config, or the pod's own ServiceAccount
    # when the portal runs in the cluster) and its context ("" = the current one).
    "KUBECONFIG": env("CARDPOOL_KUBERNETES_KUBECONFIG", ""),
    "CONTEXT": env("CARDPOOL_KUBERNETES_CONTEXT", ""),
    # A team's leases run in the namespace <prefix><team slug>.
    "NAMESPACE_PREFIX": env("CARDPOOL_KUBERNETES_NAMESPACE_PREFIX", "cardpool-"),
    # Card model slug -> extended resource, over the vendor's default (nvidia.com/gpu, ...).
    "RESOURCES": _pairs("CARDPOOL_KUBERNETES_RESOURCES", "card-model-slug=resource"),
    # Environment slug -> container image; "cards only" and unmapped ones run HOLDER_IMAGE.
    "IMAGES": _pairs("CARDPOOL_KUBERNETES_IMAGES", "environment-slug=image"),
    "HOLDER_IMAGE": env("CARDPOOL_KUBERNETES_HOLDER_IMAGE", "docker.io/library/busybox:1.36"),
    # The node label the pod's required node affinity matches the planned node's name with.
    "NODE_LABEL": env("CARDPOOL_KUBERNETES_NODE_LABEL", "kubernetes.io/hostname"),
    # mapped: the pod runs as the holder's Unix uid/gid (looked up on the portal host);
    # image: as the image's own non-root user.
    "RUN_AS": env("CARDPOOL_KUBERNETES_RUN_AS", "mapped"),
    # terminationGracePeriodSeconds of a lease's pod: SIGTERM, then this long, then SIGKILL.
    "GRACE_SECONDS": env_int("CARDPOOL_KUBERNETES_GRACE_SECONDS", 30),
    # How long one hand-over or release watches its pods before the task retries.
    "WAIT_SECONDS": env_int("CARDPOOL_KUBERNETES_WAIT_SECONDS", 20),
    # A pod the scheduler has not placed this long after it was made fails the hand-over.
    "SCHEDULE_SECONDS": env_int("CARDPOOL_KUBERNETES_SCHEDULE_SECONDS", 120),
    "REQUEST_TIMEOUT": env_int("CARDPOOL_KUBERNETES_REQUEST_TIMEOUT", 15),
    # Longest life of a holder's exec token (it is revoked at the release in any case).
    "TOKEN_SECONDS": env_int("CARDPOOL_KUBERNETES_TOKEN_SECONDS", 30 * 24 * 3600),
    # The API server address written into holders' kubeconfigs ("" = the portal's own).
    "SERVER_URL": env("CARDPOOL_KUBERNETES_SERVER_URL", ""),
    # Region of nodes sync_kubernetes creates when a node has no topology.kubernetes.io/region.
    "REGION": env("CARDPOOL_KUBERNETES_REGION", "kubernetes"),
    # Seconds between reconciliations of leases with pods, and between quota/priority mirrors.
    "RECONCILE_SECONDS": env_int("CARDPOOL_KUBERNETES_RECONCILE_SECONDS", 60),
    "MIRROR_SECONDS": env_int("CARDPOOL_KUBERNETES_MIRROR_SECONDS", 60),
}

# --- import_inventory limits (docs/operations.md, "Importing inventory") ----------------
CARDPOOL_IMPORT = {
    "MAX_BYTES": env_int("CARDPOOL_IMPORT_MAX_BYTES", 16 * 1024 * 1024),
    "MAX_ROWS": env_int("CARDPOOL_IMPORT_MAX_ROWS", 100_000),
    "MAX_CARDS_PER_NODE": env_int("CARDPOOL_IMPORT_MAX_CARDS_PER_NODE", 128),
}

# --- Email ----------------------------------------------------------------------------
EMAIL_BACKEND = env("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", "Cardpool <cardpool@localhost>")

# --- Security (production; docs/operations.md, "Running in production") -----------------
# docker-compose.yml sets the production values: behind the TLS proxy, HTTPS redirect, HSTS.
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("CARDPOOL_BEHIND_TLS_PROXY", False) else None
)
SESSION_COOKIE_SECURE = env_bool("CARDPOOL_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# Host-only cookies, and under HTTPS the __Host- prefix: a session's origin (a sub-domain,
# portal/session_hosts.py) never receives them and cannot set one the portal would read.
SESSION_COOKIE_NAME, CSRF_COOKIE_NAME = cookie_names(secure=SESSION_COOKIE_SECURE)
SESSION_COOKIE_DOMAIN = CSRF_COOKIE_DOMAIN = None
SESSION_COOKIE_PATH = CSRF_COOKIE_PATH = "/"
SECURE_SSL_REDIRECT = env_bool("CARDPOOL_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("CARDPOOL_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool(
    "CARDPOOL_HSTS_INCLUDE_SUBDOMAINS", SECURE_HSTS_SECONDS > 0
)
SECURE_HSTS_PRELOAD = env_bool("CARDPOOL_HSTS_PRELOAD", SECURE_HSTS_SECONDS > 0)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (django-csp): the portal's own scripts, styles, fonts and images
# only; nothing inline (charts are data drawn by static/js/charts.js), nothing from outside.
# data: images are plotly's icons. The API docs page (Redoc) alone adds inline styles and
# blob: workers (portal/urls.py). form-action is left open: sign-in through SSO posts, then
# redirects to the identity provider.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
SILENCED_SYSTEM_CHECKS = env_list("CARDPOOL_SILENCED_CHECKS")


# --- Cardpool ------------------------------------------------------------------------
def _purpose_priority(raw: str) -> dict[str, str]:
    """``inference=high,development=normal`` (purpose=priority class); fails loudly when
    malformed. The names are checked against leasing.choices at startup (apps.ready)."""
    pairs = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        purpose, sep, priority = (x.strip() for x in item.partition("="))
        if not sep or not purpose or not priority:
            raise ImproperlyConfigured(
                f"CARDPOOL_PURPOSE_PRIORITY: {item!r} is not purpose=priority-class"
            )
        pairs[purpose] = priority
    return pairs


CARDPOOL = {
    "DEMO_PASSWORD": env("CARDPOOL_DEMO_PASSWORD", "cardpool-demo"),
    # Longest lease anyone may ask for, in minutes, before team quotas narrow it.
    "MAX_LEASE_MINUTES": env_int("CARDPOOL_MAX_LEASE_MINUTES", 30 * 24 * 60),
    # How far ahead an advance reservation may start, in days.
    "MAX_ADVANCE_DAYS": env_int("CARDPOOL_MAX_ADVANCE_DAYS", 90),
    "BACKEND": env("CARDPOOL_BACKEND", "local"),
    # A request placed at once on nodes whose backend only keeps books (local) is handed over
    # in the request itself, answered `active`; false sends every hand-over to the workers.
    "HAND_OVER_IN_REQUEST": env_bool("CARDPOOL_HAND_OVER_IN_REQUEST", True),
    # The queue planner's picture of a card model shared between processes through the cache
    # (leasing/scheduler/plancache.py): on by default when the cache is Redis.
    "PLAN_SHARING": env_bool(
        "CARDPOOL_PLAN_SHARING", CACHES["default"]["BACKEND"].endswith("RedisCache")
    ),
    # Seconds between ticks that end leases whose end has come and start due reservations:
    # the most a lease outlives its end (besides the time to take the cards back).
    "TICK_SECONDS": env_int("CARDPOOL_TICK_SECONDS", 2),
    # A waiting lease's estimate that moves by more than this is told (timeline + notice).
    "ESTIMATE_MOVE_MINUTES": env_int("CARDPOOL_ESTIMATE_MOVE_MINUTES", 15),
    # Seconds between periodic sweeps that re-find anything a lost task missed.
    "SWEEP_SECONDS": env_int("CARDPOOL_SWEEP_SECONDS", 15),
    # A hand-over still provisioning or releasing after this long is sent again (lost task).
    "STUCK_SECONDS": env_int("CARDPOOL_STUCK_SECONDS", 60),
    # Furthest ahead of a lease's end a warning may be sent, in minutes (7 days).
    "MAX_WARNING_MINUTES": env_int("CARDPOOL_MAX_WARNING_MINUTES", 7 * 24 * 60),
    # After an idle warning, how long the cards must stay idle before a reclaim.
    "IDLE_GRACE_MINUTES": env_int("CARDPOOL_IDLE_GRACE_MINUTES", 30),
    # Time a preempted lease's holder gets to checkpoint.
    "PREEMPT_GRACE_MINUTES": env_int("CARDPOOL_PREEMPT_GRACE_MINUTES", 10),
    # The longest checkpoint time a request may declare (its preemption grace at most).
    "CHECKPOINT_MAX_SECONDS": env_int("CARDPOOL_CHECKPOINT_MAX_SECONDS", 1800),
    # A checkpoint handed to a node's agent with no word from it after this many seconds is
    # shown as not delivered (the preemption's grace runs on).
    "CHECKPOINT_ACK_SECONDS": env_int("CARDPOOL_CHECKPOINT_ACK_SECONDS", 60),
    # Raw telemetry samples are kept this long, then summarised into hourly rows (at least 2).
    "TELEMETRY_RETENTION_HOURS": env_int("CARDPOOL_TELEMETRY_RETENTION_HOURS", 48),
    # Seconds between pulls from the nodes' DCGM exporters.
    "TELEMETRY_PULL_SECONDS": env_int("CARDPOOL_TELEMETRY_PULL_SECONDS", 30),
    # Seconds between passes of the pool-health rules (alerts; hot or silent cards kept out).
    "HEALTH_SECONDS": env_int("CARDPOOL_HEALTH_SECONDS", 30),
    # Bearer token Prometheus scrapes /metrics with (empty: operators' sessions only).
    "METRICS_TOKEN": env("CARDPOOL_METRICS_TOKEN", ""),
    # Preemptible leases pay this fraction of the price (0…1; checked in leasing.billing.prices).
    "PREEMPTIBLE_DISCOUNT": env("CARDPOOL_PREEMPTIBLE_DISCOUNT", "0.5"),
    # Queue a request of this purpose at least in this priority class (it never lowers a
    # request's class, and a preemptible request stays preemptible): e.g. "inference=high"
    # serves inference before training when the pool is tight (docs/operations.md, "Queue").
    "PURPOSE_PRIORITY": _purpose_priority(env("CARDPOOL_PURPOSE_PRIORITY", "")),
}

# --- Sessions, SSH keys and workspaces (docs/operations.md, "Sessions") ---------------
CARDPOOL_SESSIONS = {
    # Ports a session's JupyterLab may listen on, on its node ("LOW-HIGH").
    "PORTS": env("CARDPOOL_SESSION_PORTS", "20000-29999"),
    # The jupyter to run when the lease's environment puts none on PATH (absolute path, readable
    # and runnable by every holder's Unix user).
    "JUPYTER": env("CARDPOOL_SESSION_JUPYTER", "jupyter"),
    # Seconds a session may take to answer before it counts as failed.
    "START_TIMEOUT": env_int("CARDPOOL_SESSION_START_TIMEOUT", 120),
    # Where the portal host keeps the output of the session processes it starts (Slurm).
    "LOG_DIR": env("CARDPOOL_SESSION_LOG_DIR", str(VAR_DIR / "sessions")),
    # The Unix account sessions, SSH keys and checkpoints run as on local-backend nodes:
    # "same" (the portal username), "profile" (the profile's Slurm user, else the username) or
    # "managed" (cardpool-<username>, created and locked by the agent; leasing.workbench.accounts).
    "ACCOUNTS": env("CARDPOOL_SESSION_ACCOUNTS", "profile"),
    # Shared directory holding users/<username> and teams/<slug> workspaces ("" = none).
    "WORKSPACE_ROOT": env("CARDPOOL_WORKSPACE_ROOT", ""),
    # Soft limit per workspace, in GiB, and the share of it at which the owner is warned.
    "WORKSPACE_SOFT_LIMIT_GB": env_int("CARDPOOL_WORKSPACE_SOFT_LIMIT_GB", 100),
    "WORKSPACE_WARN_PERCENT": env_int("CARDPOOL_WORKSPACE_WARN_PERCENT", 90),
    "WORKSPACE_MEASURE_SECONDS": env_int("CARDPOOL_WORKSPACE_MEASURE_SECONDS", 3600),
    # What the session proxy sends the portal with each question ("": derived from the key).
    "PROXY_SECRET": env("CARDPOOL_SESSION_PROXY_SECRET", "") or "",
    # Session <id> is served from its own origin, s<id>.<DOMAIN> ("": the portal's host name;
    # localhost when the portal is reached by address). portal/session_hosts.py.
    "DOMAIN": env("CARDPOOL_SESSION_DOMAIN", "").strip().lower().rstrip("."),
}
ALLOWED_HOSTS = session_allowed_hosts(ALLOWED_HOSTS, CARDPOOL_SESSIONS["DOMAIN"])

# All periodic jobs, in one place.
CELERY_BEAT_SCHEDULE = {
    "leasing-tick": {
        "task": "leasing.tasks.tick",
        "schedule": float(CARDPOOL["TICK_SECONDS"]),
        "options": {"expires": float(CARDPOOL["TICK_SECONDS"])},  # a late tick is redundant
    },
    "leasing-sweep": {"task": "leasing.tasks.sweep", "schedule": float(CARDPOOL["SWEEP_SECONDS"])},
    # The fair-share factors, at the policy's fixed times (FairSharePolicy.every_minutes).
    "fair-share-recompute": {
        "task": "leasing.tasks.fair_share_recompute",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    "slurm-reconcile": {
        "task": "leasing.tasks_slurm.reconcile_slurm",
        "schedule": float(CARDPOOL_SLURM["RECONCILE_SECONDS"]),
        "options": {"expires": float(CARDPOOL_SLURM["RECONCILE_SECONDS"])},
    },
    "kubernetes-reconcile": {
        "task": "leasing.tasks_kubernetes.reconcile_kubernetes",
        "schedule": float(CARDPOOL_KUBERNETES["RECONCILE_SECONDS"]),
        "options": {"expires": float(CARDPOOL_KUBERNETES["RECONCILE_SECONDS"])},
    },
    "kubernetes-mirror": {
        "task": "leasing.tasks_kubernetes.mirror_kubernetes",
        "schedule": float(CARDPOOL_KUBERNETES["MIRROR_SECONDS"]),
        "options": {"expires": float(CARDPOOL_KUBERNETES["MIRROR_SECONDS"])},
    },
    "inventory-pull-dcgm": {
        "task": "inventory.tasks.pull_dcgm",
        "schedule": float(CARDPOOL["TELEMETRY_PULL_SECONDS"]),
        "options": {"expires": float(CARDPOOL["TELEMETRY_PULL_SECONDS"])},
    },
    "inventory-summarise-telemetry": {
        "task": "inventory.tasks.summarise_telemetry",
        "schedule": 3600.0,
    },
    "health-evaluate": {
        "task": "leasing.tasks_health.evaluate_health",
        "schedule": float(CARDPOOL["HEALTH_SECONDS"]),
        "options": {"expires": float(CARDPOOL["HEALTH_SECONDS"])},  # a late pass is redundant
    },
    "notifications-deliveries-sweep": {
        "task": "leasing.tasks_notify.deliveries_sweep",
        "schedule": 60.0,
    },
    "workspace-measure": {
        "task": "leasing.tasks.workspaces_measure",
        "schedule": float(CARDPOOL_SESSIONS["WORKSPACE_MEASURE_SECONDS"]),
    },
    "sessions-sweep": {"task": "leasing.tasks.sessions_sweep", "schedule": 30.0},
    "usage-record-missing": {"task": "leasing.tasks_usage.usage_record_missing", "schedule": 300.0},
    # Closes the month that has ended: records running leases' part of it (billing.usage).
    "usage-close-month": {"task": "leasing.tasks_usage.usage_close_month", "schedule": 300.0},
}
if CARDPOOL_DIRECTORY["SYNC_SECONDS"] and "LDAP_AUTH_URL" in globals():
    CELERY_BEAT_SCHEDULE["directory-sync"] = {
        "task": "leasing.tasks.directory_sync",
        "schedule": float(CARDPOOL_DIRECTORY["SYNC_SECONDS"]),
        "options": {"expires": float(CARDPOOL_DIRECTORY["SYNC_SECONDS"])},
    }

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"routine_tasks": {"()": "portal.logfilters.RoutineTaskFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("CARDPOOL_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Celery's lines about each task sent, received and done: not for the 2 s tick.
        **{
            name: {"filters": ["routine_tasks"]}
            for name in ("celery.beat", "celery.worker.strategy", "celery.app.trace")
        },
    },
}
