"""Who may see and change what: every URL of the project × every role.

Roles: ``anon`` (not signed in), ``bob`` (member of another team, nlp), ``alice`` (member of
vision), ``lena`` (lead of vision), ``fin`` (finance), ``ops`` (operator).

``ROWS`` is the matrix: one row per (endpoint, method), with the expected answer per role in
the order of ``ROLES``. Every request is checked three ways:

- the status (``LOGIN``: a redirect to the sign-in page; ``MOVED``: a redirect elsewhere, as
  the HTML forms answer both success and a refusal shown as a message);
- the body never carries a lease, notification or webhook the role may not see
  (``VISIBLE``), whatever the status;
  a row with ``sees`` also says exactly which objects a list shows to each role;
- a write (``probe``) changes the database for the roles in ``writes`` and for nobody else.

``test_every_url_is_in_the_matrix`` fails when a URL is added that no row classifies.
allauth's sign-in pages, ``/i18n/`` and ``/admin/`` follow a rule per group instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import transaction
from django.urls import URLResolver, get_resolver
from rest_framework.test import APIClient

from inventory.models import Card, Node
from leasing.choices import LeaseStatus
from leasing.lifecycle import changes as lease_changes
from leasing.lifecycle import provisioning
from leasing.lifecycle import requests as lease_requests
from leasing.models import (
    Alert,
    AlertRule,
    Delivery,
    Environment,
    Lease,
    LeaseChange,
    MemberLimit,
    Notification,
    NotificationPreference,
    Quota,
    Session,
    SshKey,
    Webhook,
)
from leasing.notify import services as notify_services
from leasing.teams import services as team_services
from leasing.workbench import keys, sessions
from portal.models import Membership, Profile, Team
from portal.tokens.models import ApiToken
from portal.tokens.services import token_create
from tests.factories import (
    CardModelFactory,
    MembershipFactory,
    TeamFactory,
    UserFactory,
    make_node,
)

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=ZoneInfo("Asia/Shanghai"))
ROLES = ("anon", "bob", "alice", "lena", "fin", "ops")
LOGIN = "login"  # 302 to /accounts/login/?next=...
MOVED = "moved"  # 302 anywhere but the login page
PASSWORD = "pw-for-tests"  # tests/factories.py

# The fixture's objects by key (teams by slug); VISIBLE: what each role may ever be shown.
LEASES = ("alice_lease", "pending", "bob_lease")
NOTES = ("alice_note", "bob_note")  # notifications: their owner's only
HOOKS = ("alice_hook", "vision_hook")  # webhooks: alice's own; vision's (its leads, operators)
MARKED = LEASES + NOTES + HOOKS
VISIBLE = {
    "anon": set(),
    "bob": {"bob_lease", "bob_note"},
    "alice": {"alice_lease", "pending", "alice_note", "alice_hook"},
    "lena": {"alice_lease", "pending", "vision_hook"},
    "fin": set(LEASES),
    "ops": set(LEASES) | {"vision_hook"},
}


# --- the matrix ------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    name: str  # the URL's name, as reverse() knows it
    method: str
    path: str  # formatted with the world's ids
    expect: tuple  # per role, in ROLES order
    data: dict | list | None = None
    api: bool = False  # send data as JSON
    sees: dict = field(default_factory=dict)  # role -> "keys shown" (exactly those)
    probe: str = ""  # a STATE name; the write must change it for `writes` only
    writes: str = ""  # roles, space-separated

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}"


def r(name, method, path, expect, **kw) -> Row:
    assert len(expect) == len(ROLES), name
    return Row(name, method, path, tuple(expect), **kw)


L, M = LOGIN, MOVED
ALL_IN = (L, 200, 200, 200, 200, 200)  # any signed-in user (pages)
API_ALL_IN = (401, 200, 200, 200, 200, 200)  # any signed-in user (API)
ANYONE = (200,) * 6
OWN_OPEN = {"bob": "bob_lease", "alice": "alice_lease pending", "lena": "", "fin": "", "ops": ""}
TEAMS_SEEN = {
    "bob": "nlp",
    "alice": "vision",
    "lena": "vision",
    "fin": "vision nlp",
    "ops": "vision nlp",
}
# The lead's home lists every item waiting for her: her team's request and lease change.
HOME_SEES = {**OWN_OPEN, "lena": "alice_lease pending"}
OWN_NOTES = {"bob": "bob_note", "alice": "alice_note", "lena": "", "fin": "", "ops": ""}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHhJQBSDiV2xchor0V7cbBdxwJBddGfzqfRhxZ6eX+dl"
ALICE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGyQ0wKOm9WJ0ctIqAavyfmTfNOl6lEs0YgxRoYpOtOS"
PREVIEW = "card_model={model}&count=1&duration=1&unit=hours&start=now&team=vision"

ROWS = [
    # r(url name, method, path, expected per role: (anon, bob, alice, lena, fin, ops), ...)
    # --- pages: dashboard, profile -----------------------------------------------------
    r("dashboard", "GET", "/", ALL_IN, sees=HOME_SEES),
    r("pool", "GET", "/pool/", ALL_IN),
    r("profile:index", "GET", "/accounts/profile/", ALL_IN),
    r("profile:index", "POST", "/accounts/profile/", (L, M, M, M, M, M),
      data={"timezone": "Europe/Berlin", "language": "en"},
      probe="profiles", writes="bob alice lena fin ops"),
    r("profile:token_create", "POST", "/accounts/profile/tokens/", ALL_IN,
      data={"name": "script", "expires_in_days": "30"},
      probe="tokens", writes="bob alice lena fin ops"),
    r("profile:token_revoke", "POST", "/accounts/profile/tokens/{token}/revoke/",
      (L, 404, M, 404, 404, 404), probe="tokens", writes="alice"),
    # --- pages: notifications and webhooks ------------------------------------------------
    r("notifications:list", "GET", "/notifications/", ALL_IN, sees=OWN_NOTES),
    r("notifications:bell", "GET", "/notifications/bell/", (286, 200, 200, 200, 200, 200)),
    r("notifications:read", "POST", "/notifications/{alice_note}/read/",
      (L, 404, M, 404, 404, 404), probe="notes", writes="alice"),
    r("notifications:read_all", "POST", "/notifications/read-all/", (L, M, M, M, M, M),
      probe="notes", writes="bob alice"),
    r("notifications:settings", "GET", "/notifications/settings/", ALL_IN,
      sees={"bob": "", "alice": "alice_hook", "lena": "vision_hook", "fin": "",
            "ops": "vision_hook"}),
    r("notifications:settings", "POST", "/notifications/settings/", (L, M, M, M, M, M),
      data={"lease_active": ["inapp", "webhook"]},
      probe="prefs", writes="bob alice lena fin ops"),
    # A webhook for team vision: its lead and operators only.
    r("notifications:webhook_add", "POST", "/notifications/settings/webhooks/",
      (L, 400, 400, M, 400, M),
      data={"name": "ci", "url": "https://hooks.example.org/ci", "format": "generic",
            "team": "{vision_team}"},
      probe="webhooks", writes="lena ops"),
    r("notifications:webhook_delete", "POST",
      "/notifications/settings/webhooks/{vision_hook}/delete/", (L, 404, 404, M, 404, M),
      probe="webhooks", writes="lena ops"),
    r("notifications:webhook_delete", "POST",
      "/notifications/settings/webhooks/{alice_hook}/delete/", (L, 404, M, 404, 404, 404),
      probe="webhooks", writes="alice"),
    r("notifications:webhook_test", "POST",
      "/notifications/settings/webhooks/{vision_hook}/test/", (L, 404, 404, M, 404, M),
      probe="deliveries", writes="lena ops"),
    # --- monitoring: /metrics (operators' sessions; scrapers use the bearer token) ------------
    r("metrics", "GET", "/metrics", (401, 403, 403, 403, 403, 200)),
    # --- pages: teams ------------------------------------------------------------------
    r("team_list", "GET", "/teams/", ALL_IN, sees=TEAMS_SEEN),
    # Members see their own team's page (its use, who holds what); approvals are for managers.
    r("team_detail", "GET", "/teams/vision/", (L, 404, 200, 200, 200, 200),
      sees={"alice": "alice_lease", "lena": "alice_lease pending", "fin": "alice_lease pending",
            "ops": "alice_lease pending"}),
    r("team_detail", "GET", "/teams/nlp/", (L, 200, 404, 404, 200, 200),
      sees={"bob": "bob_lease", "fin": "bob_lease", "ops": "bob_lease"}),
    r("team_member_add", "POST", "/teams/vision/members/", (L, 404, 404, M, M, M),
      data={"member-username": "bob"}, probe="memberships", writes="lena ops"),
    r("team_member_remove", "POST", "/teams/vision/members/{alice_membership}/remove/",
      (L, 404, 404, M, M, M), probe="memberships", writes=""),  # alice holds cards: refused
    r("team_idle_policy", "POST", "/teams/vision/idle/", (L, 404, 404, M, M, M),
      data={"idle-idle_threshold_pct": "10", "idle-idle_minutes": "30",
            "idle-idle_reclaim": "on"}, probe="teams", writes="lena ops"),
    r("team_set_limit", "POST", "/teams/vision/limits/", (L, 404, 404, M, M, M),
      data={"limit-member": "{alice_membership}", "limit-card_model": "",
            "limit-max_concurrent_cards": "3"},
      probe="limits", writes="lena ops"),
    r("team_invite", "POST", "/teams/vision/invite/", (L, 404, 404, M, 404, M),
      data={"username": "newbie", "email": "newbie@example.org"},
      probe="users", writes="lena ops"),
    r("team_set_quota", "POST", "/teams/vision/quotas/", (L, 404, 404, M, M, M),
      data={"quota-card_model": "", "quota-max_concurrent_cards": "5"},
      probe="quotas", writes="ops"),
    r("team_decide", "POST", "/teams/vision/approvals/{pending}/approve/",
      (L, 404, 404, M, 404, M), data={"reason": "ok"}, probe="leases", writes="lena ops"),
    r("team_decide", "POST", "/teams/vision/approvals/{pending}/reject/",
      (L, 404, 404, M, 404, M), data={"reason": "no"}, probe="leases", writes="lena ops"),
    # A vision request decided through another team's page.
    r("team_decide", "POST", "/teams/nlp/approvals/{pending}/approve/",
      (L, 404, 404, 404, 404, 404), data={"reason": "ok"}, probe="leases"),
    # --- pages: leases -----------------------------------------------------------------
    r("leasing:list", "GET", "/leases/", ALL_IN, sees=OWN_OPEN),
    r("leasing:new", "GET", "/leases/new/", ALL_IN),
    # The form offers only the user's own teams, so vision is not a valid choice for others.
    r("leasing:new", "POST", "/leases/new/", (L, 200, M, M, 200, 200),
      data={"card_model": "{model}", "count": "1", "duration": "1", "unit": "hours",
            "start": "now", "team": "vision", "priority": "normal",
            "purpose": "development"},
      probe="leases", writes="alice lena"),
    r("leasing:preview", "GET", "/leases/preview/?" + PREVIEW, ALL_IN),
    r("leasing:calendar", "GET", "/leases/calendar/", ALL_IN),
    r("leasing:calendar_model", "GET", "/leases/calendar/{model}/", ALL_IN),
    r("leasing:timeline", "GET", "/leases/timeline/", ALL_IN),
    r("leasing:timeline_model", "GET", "/leases/timeline/{model}/", ALL_IN),
    r("leasing:detail", "GET", "/leases/{alice_lease}/", (L, 404, 200, 200, 200, 200)),
    r("leasing:detail", "GET", "/leases/{bob_lease}/", (L, 200, 404, 404, 200, 200)),
    r("telemetry:lease_utilisation", "GET", "/leases/{alice_lease}/utilisation/", (L, 404, 200, 200, 200, 200)),
    r("telemetry:lease_utilisation", "GET", "/leases/{bob_lease}/utilisation/", (L, 200, 404, 404, 200, 200)),
    r("leasing:release", "POST", "/leases/{alice_lease}/release/", (L, 404, M, M, M, M),
      probe="leases", writes="alice lena ops"),
    r("leasing:cancel", "POST", "/leases/{pending}/cancel/", (L, 404, M, M, M, M),
      probe="leases", writes="alice lena ops"),
    # alice is above her member limit and a change of hers already waits for lena: her second
    # one is refused (one pending change per lease); lena and ops need nobody's approval.
    r("leasing:extend", "POST", "/leases/{alice_lease}/extend/", (L, 404, M, M, M, M),
      data={"minutes": "30"}, probe="leases_and_changes", writes="lena ops"),
    r("leasing:change_decide", "POST", "/leases/changes/{change}/approve/",
      (L, 404, M, M, 404, M), probe="leases_and_changes", writes="lena ops"),
    r("leasing:change_decide", "POST", "/leases/changes/{change}/reject/",
      (L, 404, M, M, 404, M), data={"reason": "no"}, probe="leases_and_changes",
      writes="lena ops"),
    r("leasing:change_decide", "POST", "/leases/changes/{change}/withdraw/",
      (L, 404, M, M, 404, M), probe="leases_and_changes", writes="alice lena ops"),
    r("leasing:release", "POST", "/leases/{bob_lease}/release/", (L, M, 404, 404, M, M),
      probe="leases", writes="bob ops"),
    r("leasing:resize", "POST", "/leases/{alice_lease}/resize/", (L, 404, M, M, M, M),
      data={"count": "1"}, probe="leases", writes="alice lena ops"),
    # Operators only, and only for a failed release: alice_lease is active, so nobody writes.
    r("leasing:release_retry", "POST", "/leases/{alice_lease}/release-retry/",
      (L, 404, M, M, M, M), probe="leases"),
    r("leasing:release_resolve", "POST", "/leases/{alice_lease}/release-resolve/",
      (L, 404, M, M, M, M), probe="leases"),
    r("leasing:estimate", "GET", "/leases/estimate/", ALL_IN),
    # --- pages: reports and statements (finance, operators; leads for their teams) ----------
    r("reports:index", "GET", "/reports/", (L, 403, 403, 200, 200, 200)),
    r("reports:index", "GET", "/reports/?format=csv&team=vision", (L, 403, 403, 200, 200, 200)),
    r("reports:index", "GET", "/reports/?format=xlsx&team=nlp", (L, 403, 403, 200, 200, 200)),
    r("reports:statement", "GET", "/reports/statements/vision/2026-12/",
      (L, 404, 404, 200, 200, 200)),
    r("reports:statement", "GET", "/reports/statements/nlp/2026-12/?format=xlsx",
      (L, 404, 404, 404, 200, 200)),
    # --- pages: inventory --------------------------------------------------------------
    r("inventory:catalogue", "GET", "/inventory/", ALL_IN),
    r("inventory:card_model", "GET", "/inventory/models/{model}/", ALL_IN),
    r("inventory:nodes", "GET", "/inventory/nodes/", ALL_IN),
    r("inventory:node", "GET", "/inventory/nodes/{node}/", ALL_IN),
    # The node page's maintenance forms: operators only (others get the refusal as a message).
    r("inventory:node_drain", "POST", "/inventory/nodes/{node}/drain/", (L, M, M, M, M, M),
      data={"drain_at": "2099-01-01T00:00"}, probe="nodes", writes="ops"),
    r("inventory:node_undrain", "POST", "/inventory/nodes/{node}/undrain/",
      (L, M, M, M, M, M), probe="nodes"),  # the node is active: nothing to undrain
    r("inventory:card_faulty", "POST", "/inventory/nodes/{node}/cards/0/faulty/",
      (L, M, M, M, M, M), data={"note": "matrix"}, probe="cards", writes="ops"),
    # --- API: root, schema, token --------------------------------------------------------
    r("api-root", "GET", "/api/v1/", API_ALL_IN),
    r("api-schema", "GET", "/api/v1/schema/", API_ALL_IN),
    r("api-docs", "GET", "/api/v1/docs/", ALL_IN),
    # Each role signs in with its own password; anon tries alice's with a wrong one.
    r("api-token", "POST", "/api/v1/auth/token/", (400, 200, 200, 200, 200, 200),
      data={"username": "{user}", "password": "{password}", "name": "cli"}, api=True,
      probe="tokens", writes="bob alice lena fin ops"),
    # --- API: inventory (read-only for everyone signed in) -----------------------------
    r("card-model-list", "GET", "/api/v1/card-models/", API_ALL_IN),
    r("card-model-detail", "GET", "/api/v1/card-models/{model}/", API_ALL_IN),
    r("card-model-timeline", "GET", "/api/v1/card-models/{model}/timeline/", API_ALL_IN),
    r("node-list", "GET", "/api/v1/nodes/", API_ALL_IN),
    r("node-detail", "GET", "/api/v1/nodes/{node}/", API_ALL_IN),
    r("card-list", "GET", "/api/v1/cards/", API_ALL_IN),
    r("card-detail", "GET", "/api/v1/cards/{card}/", API_ALL_IN),
    # Maintenance: operators only. (A drain far ahead warns nobody and changes nothing else.)
    r("node-drain", "POST", "/api/v1/nodes/{node}/drain/", (401, 403, 403, 403, 403, 200),
      data={"drain_at": "2099-01-01T00:00:00Z"}, api=True),
    # The node is active: an operator's undrain is refused (nothing to undrain), said so.
    r("node-undrain", "POST", "/api/v1/nodes/{node}/undrain/", (401, 403, 403, 403, 403, 400),
      data={}, api=True),
    r("card-faulty", "POST", "/api/v1/cards/{card}/faulty/", (401, 403, 403, 403, 403, 200),
      data={"note": "matrix"}, api=True),
    # --- API: leases ---------------------------------------------------------------------
    r("lease-list", "GET", "/api/v1/leases/", API_ALL_IN, sees=OWN_OPEN),
    r("lease-list", "GET", "/api/v1/leases/?scope=all", API_ALL_IN,
      sees={"bob": "bob_lease", "alice": "alice_lease pending",
            "lena": "alice_lease pending", "fin": "alice_lease pending bob_lease",
            "ops": "alice_lease pending bob_lease"}),
    r("lease-list", "GET", "/api/v1/leases/?scope=all&team__slug=vision", API_ALL_IN,
      sees={"bob": "", "alice": "alice_lease pending", "lena": "alice_lease pending",
            "fin": "alice_lease pending", "ops": "alice_lease pending"}),
    r("lease-list", "POST", "/api/v1/leases/", (401, 403, 201, 201, 403, 201),
      data={"card_model": "{model}", "count": 1, "duration_minutes": 60, "team": "vision"},
      api=True, probe="leases", writes="alice lena ops"),
    r("lease-detail", "GET", "/api/v1/leases/{alice_lease}/", (401, 404, 200, 200, 200, 200)),
    r("lease-detail", "GET", "/api/v1/leases/{bob_lease}/", (401, 200, 404, 404, 200, 200)),
    r("lease-events", "GET", "/api/v1/leases/{alice_lease}/events/",
      (401, 404, 200, 200, 200, 200)),
    r("lease-extend", "POST", "/api/v1/leases/{alice_lease}/extend/",
      (401, 404, 400, 200, 403, 200), data={"minutes": 30}, api=True,
      probe="leases_and_changes", writes="lena ops"),
    # --- API: lease changes (alice's extension waiting for lena) ---------------------------
    r("lease-change-list", "GET", "/api/v1/lease-changes/", API_ALL_IN),
    r("lease-change-detail", "GET", "/api/v1/lease-changes/{change}/",
      (401, 404, 200, 200, 404, 200)),
    r("lease-change-approve", "POST", "/api/v1/lease-changes/{change}/approve/",
      (401, 404, 403, 200, 404, 200), api=True, probe="leases_and_changes", writes="lena ops"),
    r("lease-change-reject", "POST", "/api/v1/lease-changes/{change}/reject/",
      (401, 404, 403, 200, 404, 200), data={"reason": "no"}, api=True,
      probe="leases_and_changes", writes="lena ops"),
    r("lease-change-withdraw", "POST", "/api/v1/lease-changes/{change}/withdraw/",
      (401, 404, 200, 200, 404, 200), api=True, probe="leases_and_changes",
      writes="alice lena ops"),
    r("lease-release", "POST", "/api/v1/leases/{alice_lease}/release/",
      (401, 404, 200, 200, 403, 200), api=True, probe="leases", writes="alice lena ops"),
    r("lease-release", "POST", "/api/v1/leases/{bob_lease}/release/",
      (401, 200, 404, 404, 403, 200), api=True, probe="leases", writes="bob ops"),
    r("lease-cancel", "POST", "/api/v1/leases/{pending}/cancel/",
      (401, 404, 200, 200, 403, 200), api=True, probe="leases", writes="alice lena ops"),
    r("lease-resize", "POST", "/api/v1/leases/{alice_lease}/resize/",
      (401, 404, 200, 200, 403, 200), data={"count": 1}, api=True,
      probe="leases", writes="alice lena ops"),
    r("lease-resize", "POST", "/api/v1/leases/{bob_lease}/resize/",
      (401, 200, 404, 404, 403, 200), data={"count": 2}, api=True,
      probe="leases", writes="bob ops"),
    # Failed releases: operators only (alice_lease is active, so even ops is refused: 400).
    r("lease-release-retry", "POST", "/api/v1/leases/{alice_lease}/release-retry/",
      (401, 404, 403, 403, 403, 400), api=True, probe="leases"),
    r("lease-release-resolve", "POST", "/api/v1/leases/{alice_lease}/release-resolve/",
      (401, 404, 403, 403, 403, 400), data={"note": "done"}, api=True, probe="leases"),
    # Asking by task: computed, never written.
    # Node agents only (Authorization: Node <token>): no person's session or token works.
    r("api-telemetry", "POST", "/api/v1/telemetry/", (401,) * 6,
      data={"samples": [{"index": 0, "utilization_pct": 1}]}, api=True),
    r("api-checkpoints", "GET", "/api/v1/checkpoints/", (401,) * 6, api=True),
    r("api-checkpoint-delivered", "POST", "/api/v1/checkpoints/{alice_lease}/", (401,) * 6,
      data={"ok": True}, api=True),
    r("api-estimate", "POST", "/api/v1/estimate/", API_ALL_IN,
      data={"profile": {"task": "qlora", "params_b": 7}, "duration_minutes": 60}, api=True,
      probe="leases"),
    # --- API: reports (finance, operators; leads for their teams; a team not theirs: 400) ---
    r("api-reports-usage", "GET", "/api/v1/reports/usage/", (401, 403, 403, 200, 200, 200)),
    r("api-reports-usage", "GET", "/api/v1/reports/usage/?team=nlp&format=csv",
      (401, 403, 403, 400, 200, 200)),
    # --- pool alerts: operators only (page and API) --------------------------------------
    r("alerts:list", "GET", "/alerts/", (L, 403, 403, 403, 403, 200)),
    r("alerts:acknowledge", "POST", "/alerts/{alert}/acknowledge/", (L, 403, 403, 403, 403, M),
      probe="alerts", writes="ops"),
    r("alerts:silence", "POST", "/alerts/{alert}/silence/", (L, 403, 403, 403, 403, M),
      data={"minutes": "60"}, probe="alerts", writes="ops"),
    r("alert-list", "GET", "/api/v1/alerts/", (401, 403, 403, 403, 403, 200)),
    r("alert-detail", "GET", "/api/v1/alerts/{api_alert}/", (401, 403, 403, 403, 403, 200)),
    r("alert-acknowledge", "POST", "/api/v1/alerts/{api_alert}/acknowledge/",
      (401, 403, 403, 403, 403, 200), api=True, probe="alerts", writes="ops"),
    r("alert-silence", "POST", "/api/v1/alerts/{api_alert}/silence/",
      (401, 403, 403, 403, 403, 200), data={"minutes": 30}, api=True, probe="alerts",
      writes="ops"),
    r("alert-rule-list", "GET", "/api/v1/alert-rules/", (401, 403, 403, 403, 403, 200)),
    r("alert-rule-detail", "GET", "/api/v1/alert-rules/card_hot/",
      (401, 403, 403, 403, 403, 200)),
    r("alert-rule-detail", "PUT", "/api/v1/alert-rules/card_hot/",
      (401, 403, 403, 403, 403, 200),
      data={"threshold": 90, "for_minutes": 5, "severity": "warning"}, api=True,
      probe="alert_rules", writes="ops"),
    # --- API: notifications (each user's own; operators too see only theirs) ---------------
    r("notification-list", "GET", "/api/v1/notifications/", API_ALL_IN, sees=OWN_NOTES),
    r("notification-detail", "GET", "/api/v1/notifications/{alice_note}/",
      (401, 404, 200, 404, 404, 404)),
    r("notification-read", "POST", "/api/v1/notifications/{alice_note}/read/",
      (401, 404, 200, 404, 404, 404), api=True, probe="notes", writes="alice"),
    r("notification-read-all", "POST", "/api/v1/notifications/read-all/", API_ALL_IN,
      api=True, probe="notes", writes="bob alice"),
    # --- API: teams and quotas -----------------------------------------------------------
    r("team-list", "GET", "/api/v1/teams/", API_ALL_IN, sees=TEAMS_SEEN),
    r("team-detail", "GET", "/api/v1/teams/vision/", (401, 404, 200, 200, 200, 200)),
    r("team-detail", "GET", "/api/v1/teams/nlp/", (401, 200, 404, 404, 200, 200)),
    r("team-shares", "GET", "/api/v1/teams/vision/shares/", (401, 404, 200, 200, 200, 200)),
    r("team-shares", "PUT", "/api/v1/teams/vision/shares/", (401, 404, 403, 403, 403, 200),
      data=[], api=True),
    r("team-members", "GET", "/api/v1/teams/vision/members/", (401, 404, 200, 200, 200, 200)),
    r("team-members", "POST", "/api/v1/teams/vision/members/",
      (401, 404, 403, 201, 403, 201), data={"username": "bob"}, api=True,
      probe="memberships", writes="lena ops"),
    # alice holds cards on vision's account: nobody takes her out until they end.
    r("team-member", "DELETE", "/api/v1/teams/vision/members/alice/",
      (401, 404, 403, 400, 403, 400), probe="memberships"),
    r("team-quotas", "GET", "/api/v1/teams/vision/quotas/", (401, 404, 200, 200, 200, 200)),
    # Fair share: a team's share, use and factor to whoever sees the team; set by operators.
    r("team-fair-share", "GET", "/api/v1/teams/vision/fair-share/",
      (401, 404, 200, 200, 200, 200)),
    r("team-fair-share", "PUT", "/api/v1/teams/vision/fair-share/",
      (401, 404, 403, 403, 403, 200), data={"weight": 2}, api=True),
    r("api-fair-share", "GET", "/api/v1/fair-share/", (401, 200, 200, 200, 200, 200)),
    r("api-fair-share", "PUT", "/api/v1/fair-share/", (401, 403, 403, 403, 403, 200),
      data={"half_life_hours": 100}, api=True),
    r("team-quotas", "GET", "/api/v1/teams/nlp/quotas/", (401, 200, 404, 404, 200, 200)),
    r("team-quotas", "PUT", "/api/v1/teams/vision/quotas/", (401, 404, 403, 403, 403, 200),
      data=[{"card_model": None, "max_concurrent_cards": 5}], api=True,
      probe="quotas", writes="ops"),
    # --- API: approvals ------------------------------------------------------------------
    r("approval-list", "GET", "/api/v1/approvals/", API_ALL_IN,
      sees={"bob": "", "alice": "", "lena": "pending", "fin": "", "ops": "pending"}),
    r("approval-approve", "POST", "/api/v1/approvals/{pending}/approve/",
      (401, 404, 404, 200, 404, 200), data={"reason": "ok"}, api=True,
      probe="leases", writes="lena ops"),
    r("approval-reject", "POST", "/api/v1/approvals/{pending}/reject/",
      (401, 404, 404, 200, 404, 200), data={"reason": "no"}, api=True,
      probe="leases", writes="lena ops"),
    # --- sessions: the holder only (an operator may look and stop); the proxy's question -----
    # Without the proxy's header the question does not exist, for anyone.
    r("session_auth", "GET", "/sessions/auth/", (404,) * 6),
    # A session's login step exists only on a session's own origin (s<id>.<domain>).
    r("session_login", "GET", "/_cardpool/session-login/", (404,) * 6),
    r("session_page", "GET", "/sessions/{alice_session}/", (L, 404, 200, 404, 404, 404)),
    r("session_page_path", "GET", "/sessions/{alice_session}/lab", (L, 404, 200, 404, 404, 404)),
    # alice's session is starting already: opening returns it (nothing new); an operator
    # may not open one on someone else's lease (a message, nothing written).
    r("session_open", "POST", "/leases/{alice_lease}/session/", (L, 404, M, 404, 404, M),
      data={"target": "lab"}, probe="sessions"),
    r("session_go", "GET", "/leases/{alice_lease}/session/go/", (L, 404, 200, 404, 404, 404)),
    r("session_stop", "POST", "/leases/{alice_lease}/session/{alice_session}/stop/",
      (L, 404, M, 404, 404, M), probe="sessions", writes="alice ops"),
    r("lease_environment", "POST", "/leases/{alice_lease}/environment/",
      (L, 404, M, 404, 404, M), data={"environment": "{env}"}, probe="lease_envs",
      writes="alice"),
    r("ssh_key_add", "POST", "/accounts/profile/ssh-keys/", (L, M, M, M, M, M),
      data={"public_key": KEY, "name": "laptop"}, probe="keys",
      writes="bob alice lena fin ops"),
    r("ssh_key_remove", "POST", "/accounts/profile/ssh-keys/{alice_key}/remove/",
      (L, 404, M, 404, 404, 404), probe="keys", writes="alice"),
    r("environment-list", "GET", "/api/v1/environments/", API_ALL_IN),
    r("environment-detail", "GET", "/api/v1/environments/{env}/", API_ALL_IN),
    r("ssh-key-list", "GET", "/api/v1/ssh-keys/", API_ALL_IN),
    r("ssh-key-list", "POST", "/api/v1/ssh-keys/", (401, 201, 201, 201, 201, 201),
      data={"public_key": KEY}, api=True, probe="keys", writes="bob alice lena fin ops"),
    r("ssh-key-detail", "DELETE", "/api/v1/ssh-keys/{alice_key}/",
      (401, 404, 204, 404, 404, 404), api=True, probe="keys", writes="alice"),
    r("api-lease-session", "GET", "/api/v1/leases/{alice_lease}/session/",
      (401, 404, 200, 404, 404, 200)),
    r("api-lease-session", "POST", "/api/v1/leases/{alice_lease}/session/",
      (401, 404, 202, 404, 404, 404), api=True, probe="sessions"),
    r("api-lease-session-offers", "GET", "/api/v1/leases/{alice_lease}/session/offers/",
      (401, 404, 200, 404, 404, 200)),
    r("api-lease-session", "DELETE", "/api/v1/leases/{alice_lease}/session/",
      (401, 404, 204, 404, 404, 204), api=True, probe="sessions", writes="alice ops"),
    # Node agents only (Authorization: Node <token>).
    r("api-agent-work", "GET", "/api/v1/agent/work/", (401,) * 6),
    r("api-agent-sessions", "POST", "/api/v1/agent/sessions/", (401,) * 6,
      data={"sessions": []}, api=True),
    r("api-agent-accounts", "POST", "/api/v1/agent/accounts/", (401,) * 6,
      data={"accounts": []}, api=True),
]  # fmt: skip

# Database state a write may change, read before and after the request.
STATE = {
    "leases": lambda: list(
        Lease.objects.order_by("pk").values_list("pk", "status", "count", "end_at")
    ),
    "leases_and_changes": lambda: (
        list(Lease.objects.order_by("pk").values_list("pk", "status", "count", "end_at")),
        list(LeaseChange.objects.order_by("pk").values_list("pk", "status")),
    ),
    "limits": lambda: list(MemberLimit.objects.order_by("pk").values()),
    "users": lambda: list(get_user_model().objects.order_by("pk").values_list("pk", "username")),
    "nodes": lambda: list(Node.objects.order_by("pk").values_list("pk", "status", "drain_at")),
    "cards": lambda: list(Card.objects.order_by("pk").values_list("pk", "status")),
    "memberships": lambda: list(Membership.objects.order_by("pk").values_list("pk", "role")),
    "teams": lambda: list(Team.objects.order_by("pk").values()),
    "quotas": lambda: list(Quota.objects.order_by("pk").values()),
    "tokens": lambda: list(ApiToken.objects.order_by("pk").values_list("pk", "user_id")),
    "profiles": lambda: list(Profile.objects.order_by("pk").values_list("pk", "timezone")),
    "notes": lambda: list(Notification.objects.order_by("pk").values_list("pk", "read_at")),
    "prefs": lambda: list(NotificationPreference.objects.order_by("pk").values()),
    "webhooks": lambda: list(Webhook.objects.order_by("pk").values_list("pk", "name")),
    "alerts": lambda: list(
        Alert.objects.order_by("pk").values_list("pk", "status", "silenced_until")
    ),
    "alert_rules": lambda: list(AlertRule.objects.order_by("pk").values_list("kind", "threshold")),
    "deliveries": lambda: list(Delivery.objects.order_by("pk").values_list("pk")),
    "sessions": lambda: list(Session.objects.order_by("pk").values_list("pk", "status")),
    "lease_envs": lambda: list(Lease.objects.order_by("pk").values_list("pk", "environment")),
    "keys": lambda: list(SshKey.objects.order_by("pk").values_list("pk", "user_id")),
}


# --- the world every row runs against ----------------------------------------------------


@dataclass
class World:
    ids: dict  # for the paths and data: {alice_lease}, {model}, ...
    users: dict  # role -> user (None for anon)
    markers: dict  # object key -> text only that object's data carries


@pytest.fixture(scope="module")
def _world(django_db_setup, django_db_blocker):
    """The world, built once for the module inside a transaction rolled back at its end.

    Each test's ``db`` fixture opens a savepoint inside it (and ``test_matrix`` one more per
    role), so every request still starts from this same state. Building it once per row
    instead would double the module's run time.
    """
    with django_db_blocker.unblock(), transaction.atomic():
        yield _build_world()
        transaction.set_rollback(True)


@pytest.fixture
def world(_world, db):
    cache.clear()  # throttles of the token endpoint
    return _world


def _build_world() -> World:
    """The users of tests/conftest.py; quotas for both teams, an active lease of alice
    (vision, two cards) and of bob (nlp, one card), a request of alice above her member
    limit waiting for lena, and an API token of alice; a notification each for alice and
    bob, a webhook of alice's and one of vision."""
    vision, nlp = TeamFactory(slug="vision", name="Vision"), TeamFactory(slug="nlp", name="NLP")
    alice, lena, bob = (UserFactory(username=name) for name in ("alice", "lena", "bob"))
    MembershipFactory(user=alice, team=vision, role=Membership.Role.MEMBER)
    MembershipFactory(user=lena, team=vision, role=Membership.Role.LEAD)
    MembershipFactory(user=bob, team=nlp, role=Membership.Role.MEMBER)
    fin = UserFactory(username="fin", profile__is_finance=True)
    ops = UserFactory(username="ops", profile__is_operator=True)
    with time_machine.travel(T0, tick=False):
        model = CardModelFactory(slug="perm-a100", name="Perm A100")
        node = make_node(model, cards=8, hostname="perm-node")
        team_services.quota_set(
            user=ops, team=vision, card_model=None, max_concurrent_cards=8,
            card_hours_per_month=Decimal(1000),
        )  # fmt: skip
        team_services.quota_set(user=ops, team=nlp, card_model=None, max_concurrent_cards=8)
        membership = Membership.objects.get(user=alice, team=vision)

        def ask(user, team, key, count=1):
            return lease_requests.lease_request(
                user=user, team=team, card_model=model, count=count,
                duration=timedelta(hours=2), description=f"marker-{key}",
            )  # fmt: skip

        alice_lease = ask(alice, vision, "alice_lease", count=2)
        bob_lease = ask(bob, nlp, "bob_lease")
        for lease in (alice_lease, bob_lease):
            provisioning.provision_step(lease_id=lease.pk)
            lease.refresh_from_db()
        team_services.member_limit_set(
            user=lena, membership=membership, card_model=None, max_concurrent_cards=1
        )
        pending = ask(alice, vision, "pending", count=2)
        change = lease_changes.lease_extend(
            lease=alice_lease, user=alice, minutes=10
        ).pending_change
        token, _key = token_create(user=alice, name="alice's laptop")
        env = Environment.objects.create(
            slug="perm-env", name="Perm env", stack_family="cuda", vendors=["nvidia"]
        )
        alice_session = sessions.session_open(lease=alice_lease, user=alice)
        alice_key = keys.ssh_key_add(user=alice, public_key=ALICE_KEY)
        notes = {
            f"{user.username}_note": Notification.objects.create(
                user=user, lease=lease, kind="lease_active", title=f"marker-{user.username}_note",
                created_at=T0,
            )
            for user, lease in ((alice, alice_lease), (bob, bob_lease))
        }  # fmt: skip
        hooks = {
            "alice_hook": notify_services.webhook_create(
                user=alice, name="marker-alice_hook", url="https://hooks.example.org/alice"
            ),
            "vision_hook": notify_services.webhook_create(
                user=lena, team=vision, name="marker-vision_hook",
                url="https://hooks.example.org/vision",
            ),
        }  # fmt: skip
        alerts = {
            key: Alert.objects.create(
                kind="card_hot", severity="warning", subject=f"card:{card.pk}", card=card,
                opened_at=T0, last_seen_at=T0, value=92,
            )
            for key, card in zip(("alert", "api_alert"), node.cards.order_by("index"), strict=False)
        }  # fmt: skip
    assert pending.status == LeaseStatus.PENDING_APPROVAL
    assert alice_lease.status == bob_lease.status == LeaseStatus.ACTIVE
    return World(
        ids={
            "alice_lease": alice_lease.pk,
            "bob_lease": bob_lease.pk,
            "pending": pending.pk,
            "change": change.pk,
            "token": token.pk,
            **{key: obj.pk for key, obj in (notes | hooks | alerts).items()},
            "alice_membership": membership.pk,
            "alice_session": alice_session.pk,
            "alice_key": alice_key.pk,
            "env": env.slug,
            "vision_team": vision.pk,
            "model": model.slug,
            "node": node.hostname,
            "card": node.cards.order_by("index").first().uuid,
        },
        users={"anon": None, "bob": bob, "alice": alice, "lena": lena, "fin": fin, "ops": ops},
        markers={key: f"marker-{key}" for key in MARKED},
    )


def _fill(value, ids: dict):
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    return value


def _send(client, row: Row, role: str, world: World):
    ids = world.ids | {
        "user": role if role != "anon" else "alice",
        "password": PASSWORD if role != "anon" else "wrong",
    }
    path = _fill(row.path, ids)
    data = _fill(row.data, ids)
    call = getattr(client, row.method.lower())
    if row.api:
        return call(path, data, format="json")
    return call(path, data) if data is not None else call(path)


def _shown(response, world: World, keys: set[str]) -> set[str]:
    """Which of the fixture's leases (by key) and teams (by slug) the response shows."""
    if response["Content-Type"].startswith("application/json"):
        body = response.json()
        items = body.get("results", body) if isinstance(body, dict) else body
        found = {item.get("id") for item in items} | {item.get("slug") for item in items}
        return {k for k in keys if world.ids.get(k, k) in found}
    html = response.content.decode()
    leases = {k for k in keys & set(LEASES) if f'href="/leases/{world.ids[k]}/"' in html}
    teams = {
        k for k in keys & {"vision", "nlp"} if f'<small class="muted mono">{k}</small>' in html
    }
    others = {k for k in keys & set(NOTES + HOOKS) if world.markers[k] in html}
    return leases | teams | others


def _check_status(response, expected) -> str | None:
    code = response.status_code
    location = response.get("Location", "")
    if expected == LOGIN:
        ok = code == 302 and location.startswith("/accounts/login/")
    elif expected == MOVED:
        ok = code == 302 and not location.startswith("/accounts/login/")
    else:
        ok = code == expected
    return None if ok else f"expected {expected}, got {code} {location}".strip()


def _body(response) -> bytes:
    """The whole body, also of a streamed answer (CSV exports, files)."""
    if response.streaming:
        return b"".join(response.streaming_content)
    return response.content


def _check(row: Row, role: str, world: World) -> list[str]:
    """What is wrong with *role*'s answer to *row* (nothing: an empty list)."""
    client = APIClient(HTTP_ACCEPT_LANGUAGE="en")
    if world.users[role] is not None:
        client.force_login(world.users[role])
    before = STATE[row.probe]() if row.probe else None
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        response = _send(client, row, role, world)

    problem = _check_status(response, row.expect[ROLES.index(role)])
    if problem:
        json_body = response.get("Content-Type", "").startswith("application/json")
        return [
            f"{role}: {problem} {response.content[:200]!r}" if json_body else f"{role}: {problem}"
        ]
    problems = []
    body = _body(response).decode(errors="replace")
    leaked = {k for k in MARKED if world.markers[k] in body} - VISIBLE[role]
    if leaked:
        problems.append(f"{role}: shows {sorted(leaked)}")
    if row.sees and response.status_code == 200:
        expected = set(row.sees[role].split())
        universe = set().union(*(set(v.split()) for v in row.sees.values()))
        shown = _shown(response, world, universe)
        if shown != expected:
            problems.append(f"{role}: shows {sorted(shown)}, expected {sorted(expected)}")
    if row.probe:
        changed = STATE[row.probe]() != before
        if changed != (role in row.writes.split()):
            problems.append(f"{role}: the {row.probe} {'changed' if changed else 'did not change'}")
    return problems


@pytest.mark.parametrize("row", [pytest.param(row, id=row.id) for row in ROWS])
def test_matrix(row: Row, world: World):
    """Each role in turn, each inside a savepoint rolled back after it (one world per row)."""
    problems = []
    for role in ROLES:
        with transaction.atomic():
            problems += _check(row, role, world)
            transaction.set_rollback(True)
    if problems:
        pytest.fail(f"{row.id}\n" + "\n".join(problems), pytrace=False)


# --- every URL is classified -------------------------------------------------------------

# Whole URLconfs that follow a rule per group (tests below) instead of rows.
GROUPS = {"allauth.urls": "accounts", "django.conf.urls.i18n": "i18n", "admin": "admin"}


def _full_names():
    """URL name with its namespace (``leasing:detail``) for every pattern outside the groups."""
    resolver = get_resolver()
    names: dict[str, list] = {}

    def walk(patterns, prefix, namespace, group):
        for p in patterns:
            if isinstance(p, URLResolver):
                module = p.urlconf_name
                key = p.namespace if p.namespace == "admin" else getattr(module, "__name__", "")
                ns = ":".join(x for x in (namespace, p.namespace) if x)
                walk(p.url_patterns, prefix + str(p.pattern), ns, group or GROUPS.get(key))
            else:
                route = prefix + str(p.pattern)
                name = f"{namespace}:{p.name}" if namespace and p.name else p.name or route
                names.setdefault(name, []).append((route, p.callback, group))

    walk(resolver.url_patterns, "", "", None)
    return names


def test_every_url_is_in_the_matrix():
    """A new URL fails here until a row (or a group) says who may use it."""
    in_rows = {row.name for row in ROWS}
    urls = {name for name, entries in _full_names().items() if entries[0][2] is None}
    assert urls - in_rows == set(), "URLs nobody classified: add rows to ROWS"
    assert in_rows - urls == set(), "rows for URLs that no longer exist"


def _drf_methods(callback) -> set[str] | None:
    """The HTTP methods a DRF endpoint answers (None for a plain Django view)."""
    if getattr(callback, "actions", None):
        return {m.upper() for m in callback.actions} - {"HEAD"}
    cls = getattr(callback, "cls", None)
    if cls is None:
        return None
    return {m.upper() for m in cls.http_method_names if hasattr(cls, m)} - {"OPTIONS", "HEAD"}


def test_every_api_method_is_in_the_matrix():
    """A new action on an existing API URL (say DELETE on a lease) needs its own row too."""
    in_rows: dict[str, set[str]] = {}
    for row in ROWS:
        in_rows.setdefault(row.name, set()).add(row.method)
    for name, entries in _full_names().items():
        route, callback, group = entries[0]
        methods = _drf_methods(callback)
        if group is None and methods is not None:
            assert methods == in_rows.get(name, set()), f"{name} ({route})"


# --- the groups ---------------------------------------------------------------------------


def _group_routes(group: str) -> list[str]:
    """The routes of a group that take no arguments, as paths."""
    routes = []
    for entries in _full_names().values():
        for route, _callback, g in entries:
            if g == group and "<" not in route and "(?P" not in route:
                routes.append("/" + route.replace("^", "").replace("$", ""))
    return sorted(set(routes))


@pytest.mark.parametrize("role", ["anon", "bob", "alice"])
def test_account_pages_work_and_show_no_lease(role, world, api):
    """allauth's pages (sign-in, sign-up, password, email): public or the user's own; they
    never show leases or teams."""
    user = world.users[role]
    if user is not None:
        api.force_login(user)
    for path in _group_routes("accounts"):
        response = api.get(path)
        assert response.status_code < 500, path
        body = response.content.decode(errors="replace")
        assert not any(marker in body for marker in world.markers.values()), path


@pytest.mark.parametrize("role", ROLES)
def test_set_language_changes_only_the_cookie(role, world, api):
    if world.users[role] is not None:
        api.force_login(world.users[role])
    before = {name: probe() for name, probe in STATE.items()}
    for path in _group_routes("i18n"):
        response = api.post(path, {"language": "en", "next": "/"})
        assert response.status_code == 302 and response.cookies["django_language"].value == "en"
    assert {name: probe() for name, probe in STATE.items()} == before


@pytest.mark.parametrize("role", ROLES)
def test_admin_needs_staff(role, world, api):
    """None of the roles is staff (an operator too signs in to the admin as staff)."""
    if world.users[role] is not None:
        api.force_login(world.users[role])
    paths = _group_routes("admin")
    assert "/admin/" in paths
    for path in paths:
        if path.startswith("/admin/logout/"):
            continue
        response = api.get(path)
        if path == "/admin/login/":
            assert response.status_code == 200, path
            continue
        assert response.status_code == 302, path
        assert response["Location"].startswith("/admin/login/"), path


def test_api_token_sees_what_the_session_sees(world, api):
    """Token and session authentication scope the same: alice's token, alice's leases."""
    _token, key = token_create(user=world.users["alice"], name="cli")
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    ids = {lease["id"] for lease in api.get("/api/v1/leases/?scope=all").json()["results"]}
    assert ids == {world.ids["alice_lease"], world.ids["pending"]}
    assert api.get(f"/api/v1/leases/{world.ids['bob_lease']}/").status_code == 404
    assert json.loads(api.get("/api/v1/approvals/").content)["results"] == []
    with transaction.atomic():
        assert api.post(f"/api/v1/approvals/{world.ids['pending']}/approve/").status_code == 404
