"""Browser sessions on a lease: JupyterLab (and its terminals) on the leased node, as the
holder, inside the lease's environment, reached only through the portal's session proxy.

Who may reach a session is decided here, per request, by ``session_gate`` (the proxy asks
``/sessions/auth/`` before every request and websocket, nginx ``auth_request``). Starting
and stopping the program is the backend's (``lifecycle.session_steps``); a session ends with
its lease in ``scheduler.run.release_begin`` (``Session.objects.end_for_lease``).
"""

from __future__ import annotations

import json
import secrets
import shlex
import urllib.request
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from leasing.choices import LeaseStatus
from leasing.enqueue import enqueue_after_commit
from leasing.models import Environment, Lease, Session, SessionStatus
from leasing.transitions import event_record
from leasing.workbench import offers, workspace

# Where a session opens, under its base URL.
JUPYTERLAB_PATH = "lab"
# The desktop (noVNC through websockify, on the session's port + 1), under its base URL.
DESKTOP_PREFIX = "desktop/"


def desktop_path(session: Session) -> str:
    """noVNC's page, told to connect back through the same gate and to size the desktop
    to the window."""
    base = session.base_url.lstrip("/")
    return (
        f"{DESKTOP_PREFIX}vnc.html?path={base}{DESKTOP_PREFIX}websockify"
        "&autoconnect=1&resize=remote&reconnect=1"
    )


# Run in the session (before JupyterLab) when the lease's node offers the desktop: Xvnc on a
# Unix socket in a 0700 directory of the holder's, websockify on port + 1 serving noVNC and
# admitting only requests carrying the session's token (the proxy adds it after the portal's
# gate said yes), and a terminal on the display. A desktop that cannot start leaves the lab.
DESKTOP = r"""
cardpool_desktop() {
  local dir vnc display=$(( 100 + SESSION_ID % 5000 ))
  vnc=$(command -v Xvnc || command -v Xtigervnc) || return 0
  dir=$(mktemp -d "/tmp/cardpool-desktop-SESSION_ID-XXXXXX") || return 0
  rm -f "/tmp/.X$display-lock" "/tmp/.X11-unix/X$display" 2>/dev/null || true
  (umask 077; printf '%s' "$JUPYTER_TOKEN" > "$dir/token")
  cat > "$dir/cardpool_desktop_auth.py" <<'PY'
import hmac
from websockify.auth_plugins import AuthenticationError
class Token:
    def __init__(self, src=None):
        with open(src) as f:
            self.expected = ("token " + f.read().strip()).encode()
    def authenticate(self, headers, target_host, target_port):
        if not hmac.compare_digest((headers.get("Authorization") or "").encode(), self.expected):
            raise AuthenticationError(response_code=403, response_msg="Forbidden")
PY
  mkdir -p "$dir/web/sessions/SESSION_ID"
  ln -s /usr/share/novnc "$dir/web/sessions/SESSION_ID/desktop"
  "$vnc" ":$display" -rfbport -1 -rfbunixpath "$dir/vnc.sock" -SecurityTypes None \
    -geometry 1600x900 -depth 24 -nolisten tcp -desktop "Cardpool" >"$dir/xvnc.log" 2>&1 &
  PYTHONPATH="$dir" websockify --web "$dir/web" --web-auth \
    --auth-plugin cardpool_desktop_auth.Token --auth-source "$dir/token" \
    --unix-target "$dir/vnc.sock" "$CARDPOOL_SESSION_IP:DESKTOP_PORT" >"$dir/websockify.log" 2>&1 &
  (for _ in $(seq 100); do [ -S "$dir/vnc.sock" ] && break; sleep 0.1; done
   export DISPLAY=":$display"
   for app in xterm x-terminal-emulator; do
     if command -v "$app" >/dev/null; then "$app" >/dev/null 2>&1 & break; fi
   done) &
}
cardpool_desktop || true
"""


def port_range() -> tuple[int, int]:
    low, _sep, high = str(settings.CARDPOOL_SESSIONS["PORTS"]).partition("-")
    return int(low), int(high or low)


def _pick_port() -> int:
    """A port in the range whose next one (the desktop's) is in it too."""
    low, high = port_range()
    return low + secrets.randbelow(max(1, high - low))


def session_open(*, lease: Lease, user, want: str = "lab", now: datetime | None = None) -> Session:
    """The holder's running or starting session on *lease*, else a new one (started by the
    worker after commit). Only the holder may open one, only while the lease is active, and
    only what the node offers (*want*: lab, terminal or desktop; offers.lease_offers)."""
    now = now or timezone.now()
    if lease.user_id != user.pk:
        raise PermissionDenied(_("Only the holder of a lease may open a session on it."))
    if lease.status != LeaseStatus.ACTIVE:
        raise ValidationError(_("Sessions can be opened only while the lease is active."))
    offer = offers.lease_offers(lease).get(want)
    if offer is None or not offer.ok:
        raise ValidationError(offer.reason if offer else _("Unknown session kind."))
    live = Session.objects.live().filter(lease=lease).first()
    if live is not None:
        return live
    hosts = [n.get("host") for n in (lease.access or {}).get("nodes", []) if n.get("host")]
    if not hosts:
        raise ValidationError(_("The lease's cards are not handed over yet."))
    try:
        with transaction.atomic():
            session = Session.objects.create(
                lease=lease,
                user=user,
                environment=lease.environment,
                host=hosts[0],
                port=_pick_port(),
                token=secrets.token_hex(24),
                created_at=now,
            )
            event_record(
                lease.pk,
                kind="session_opened",
                at=now,
                actor=user,
                data={"session": session.pk, "host": session.host},
            )
            enqueue_after_commit("leasing.tasks.session_start", session.pk)
    except IntegrityError:  # opened twice at once: the other one won
        return Session.objects.live().get(lease=lease)
    return session


def session_stop(*, session: Session, user, now: datetime | None = None) -> bool:
    """End a live session before its lease ends (the holder or an operator)."""
    from portal.permissions import is_operator

    now = now or timezone.now()
    if session.user_id != user.pk and not is_operator(user):
        raise PermissionDenied(_("Only the holder may stop this session."))
    with transaction.atomic():
        stopped = (
            Session.objects.live()
            .filter(pk=session.pk)
            .update(status=SessionStatus.ENDED, ended_at=now, end_reason="stopped")
        )
        if stopped:
            event_record(
                session.lease_id,
                kind="session_stopped",
                at=now,
                actor=user,
                data={"session": session.pk},
            )
            enqueue_after_commit("leasing.tasks.session_stop", session.pk)
    return bool(stopped)


def session_running(*, session_id: int, address: str, now: datetime | None = None) -> bool:
    """The program answers: starting → running (the proxy routes to *address* from now)."""
    now = now or timezone.now()
    with transaction.atomic():
        done = Session.objects.filter(pk=session_id, status=SessionStatus.STARTING).update(
            status=SessionStatus.RUNNING, address=address, started_at=now
        )
        if done:
            lease_id = Session.objects.values_list("lease_id", flat=True).get(pk=session_id)
            event_record(lease_id, kind="session_running", at=now, data={"session": session_id})
    return bool(done)


# Why a session failed, as the holder reads it (what happened, and what to do).
FAILURES = {
    "no_account": gettext_lazy(
        "%(node)s has no Unix account for you. Ask an operator to create it, or to let the "
        "agent make accounts (CARDPOOL_SESSION_ACCOUNTS=managed)."
    ),
    "agent_not_root": gettext_lazy(
        "The agent on %(node)s cannot start sessions as you (it does not run as root). Ask an "
        "operator."
    ),
    "fence": gettext_lazy(
        "%(node)s cannot fence the cards (bubblewrap is missing or not allowed there), so the "
        "session was not started. Ask an operator."
    ),
    "exited": gettext_lazy(
        "The session stopped while starting. Try again; if it stops again, choose another "
        "environment or ask an operator (the node's log is kept for them)."
    ),
    "no_answer": gettext_lazy(
        "The session did not answer in time: the agent on %(node)s may be down. Try again in a "
        "minute, or ask an operator to check cardpool-agent there."
    ),
    "backend": gettext_lazy(
        "%(node)s refused to start the session. Try again; if it keeps failing, ask an operator."
    ),
}


def failure_message(session: Session) -> str:
    """Why *session* failed, in the reader's language ("" unless it failed)."""
    if session.status != SessionStatus.FAILED:
        return ""
    text = FAILURES.get(session.failure_kind) or FAILURES["backend"]
    return str(text) % {"node": session.host}


def session_failed(
    *, session_id: int, reason: str, kind: str = "backend", now: datetime | None = None
) -> bool:
    """The program could not be started (or died): the holder sees why on the lease page
    (*kind*, a key of FAILURES, in their language; *reason*, the node's words, is kept for
    the operator)."""
    now = now or timezone.now()
    with transaction.atomic():
        done = (
            Session.objects.live()
            .filter(pk=session_id)
            .update(
                status=SessionStatus.FAILED,
                ended_at=now,
                end_reason="failed",
                failure_kind=kind if kind in FAILURES else "backend",
                failure_reason=reason[:2000],
            )
        )
        if done:
            lease_id = Session.objects.values_list("lease_id", flat=True).get(pk=session_id)
            event_record(
                lease_id,
                kind="session_failed",
                at=now,
                data={"session": session_id, "why": kind},
            )
    return bool(done)


def _jupyter_call(session: Session, method: str, path: str, body: dict) -> bytes:
    url = f"http://{session.address or session.host}:{session.port}{session.base_url}{path}"
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"token {session.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - to the node
        return answer.read()


def session_terminal_new(session: Session) -> str:
    """Open a new terminal in the running session; the path (under its base URL) of a
    JupyterLab layout that shows just that terminal. JupyterLab 4 has no URL for a
    terminal, so a workspace (its saved layout) holding it is written first."""
    try:
        name = str(json.loads(_jupyter_call(session, "POST", "api/terminals", {}))["name"])
        workspace_id = f"cardpool-terminal-{name}"
        widget = f"terminal:{name}"
        layout = {
            "data": {
                "layout-restorer:data": {
                    "main": {
                        "dock": {"type": "tab-area", "currentIndex": 0, "widgets": [widget]},
                        "current": widget,
                    }
                },
                widget: {"data": {"name": name}},
            },
            "metadata": {"id": workspace_id},
        }
        _jupyter_call(session, "PUT", f"lab/api/workspaces/{workspace_id}", layout)
    except (OSError, ValueError, KeyError) as exc:
        raise ValidationError(_("The session did not open a terminal: %(e)s") % {"e": exc}) from exc
    return f"lab/workspaces/{workspace_id}"


# --- what runs on the node ---------------------------------------------------------------


def _enter(environment: Environment | None) -> tuple[list[str], str]:
    """Shell lines that enter *environment*, and the prefix the program runs under."""
    if environment is None or environment.entry_kind == Environment.Entry.NONE:
        return [], ""
    entry = shlex.quote(environment.entry)
    kind = environment.entry_kind
    if kind == Environment.Entry.MODULE:
        return [f"module load {entry}"], ""
    if kind == Environment.Entry.VENV:
        return [f". {entry}/bin/activate"], ""
    if kind == Environment.Entry.CONDA:
        return ['eval "$(conda shell.bash hook)"', f"conda activate {entry}"], ""
    gpu = "--nv " if "nvidia" in (environment.vendors or []) else ""
    return [], f'apptainer exec {gpu}--bind "$CARDPOOL_WORKSPACE_ROOT" {entry} '


def session_script(session: Session, lease: Lease, devices: dict[str, str]) -> str:
    """The bash script a backend runs as the holder on the node (fed on stdin, so the token
    never appears in a process list): it sets the cards' visibility variable from the
    allocation (unless Slurm set it for the step already), enters the environment and execs
    JupyterLab on ``$CARDPOOL_SESSION_IP:port`` under ``/sessions/<id>/``."""
    paths = workspace.workspace_paths(user=lease.user, team=lease.team)
    root_dir = paths.get("user") or ""
    lines = [
        "set -e",
        'export HOME="$(getent passwd "$(id -un)" | cut -d: -f6)"',
        'cd "$HOME"',
        f"export JUPYTER_TOKEN={shlex.quote(session.token)}",
        'export CARDPOOL_SESSION_IP="${CARDPOOL_SESSION_IP:-127.0.0.1}"',
    ]
    for name, value in sorted(devices.items()):
        # Slurm sets its own for a GPU step (right under ConstrainDevices too); else ours.
        lines.append(f'export {name}="${{{name}-{value}}}"')
    root = settings.CARDPOOL_SESSIONS["WORKSPACE_ROOT"]
    lines.append(f"export CARDPOOL_WORKSPACE_ROOT={shlex.quote(root)}")
    for key, env_name in (("user", "CARDPOOL_WORKSPACE"), ("team", "CARDPOOL_TEAM_WORKSPACE")):
        if paths.get(key):
            lines.append(f"export {env_name}={shlex.quote(paths[key])}")
    if root_dir:
        lines.append(
            f"mkdir -p {shlex.quote(root_dir)} 2>/dev/null && cd {shlex.quote(root_dir)} || true"
        )
    enter, prefix = _enter(session.environment)
    lines += enter
    if offers.lease_offers(lease)["desktop"].ok:
        lines.append(
            DESKTOP.replace("SESSION_ID", str(int(session.pk))).replace(
                "DESKTOP_PORT", str(int(session.port) + 1)
            )
        )
    fallback = shlex.quote(settings.CARDPOOL_SESSIONS["JUPYTER"])
    lines.append(f"JUPYTER=$(command -v jupyter || echo {fallback})")
    lines.append(
        f'exec {prefix}"$JUPYTER" lab --no-browser --ip="$CARDPOOL_SESSION_IP" '
        f"--port={session.port} --port-retries=0 "
        f"--ServerApp.base_url={session.base_url} "
        '--ServerApp.root_dir="$PWD" '
        "--ServerApp.allow_remote_access=True --ServerApp.trust_xheaders=True "
        "--ServerApp.terminals_enabled=True --LabApp.news_url=None "
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate "
        "--ServerApp.shutdown_no_activity_timeout=0"
    )
    return "\n".join(lines) + "\n"


# --- the proxy's question ---------------------------------------------------------------


@dataclass(frozen=True)
class Gate:
    """What the proxy does with one request to ``/sessions/<id>/…``."""

    session: Session | None
    allow: bool
    # For the portal's own answer when not allowed: 404 (not yours / no such session),
    # "starting", or "ended".
    state: str


def session_gate(*, user, session_id: int) -> Gate:
    """Whether *user* may reach session *session_id* now. Only the holder, only while the
    session runs and its lease is active; to anyone else the session does not exist."""
    session = (
        Session.objects.select_related("lease").filter(pk=session_id).first()
        if getattr(user, "is_authenticated", False)
        else None
    )
    if session is None or session.user_id != user.pk:
        return Gate(None, False, "missing")
    if session.status == SessionStatus.STARTING and session.lease.status == LeaseStatus.ACTIVE:
        return Gate(session, False, "starting")
    if session.status != SessionStatus.RUNNING or session.lease.status != LeaseStatus.ACTIVE:
        return Gate(session, False, "ended")
    return Gate(session, True, "running")
