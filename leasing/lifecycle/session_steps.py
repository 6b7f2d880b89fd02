"""Starting and stopping a lease's browser session through the lease's backend (called by
the tasks ``leasing.tasks.session_start`` / ``session_check`` / ``session_stop``).

The records and who may reach a session are ``leasing.workbench.sessions``'; this module
adds what needs the lease's holding and backend.
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from leasing.backends import BackendError, SessionSpec, TransientBackendError, get_backend
from leasing.choices import LeaseStatus
from leasing.lifecycle.provisioning import holding_of
from leasing.models import Session, SessionStatus
from leasing.workbench import sessions

logger = logging.getLogger(__name__)


def _devices(lease, host: str) -> dict[str, str]:
    for node in (lease.access or {}).get("nodes", []):
        if node.get("host") == host:
            return dict(node.get("env") or {})
    return {}


def session_start_step(*, session_id: int) -> str:
    """Ask the lease's backend to start a starting session. Returns "agent" (the node's
    agent will), "check" (started: probe it), or "" (nothing to do)."""
    session = (
        Session.objects.select_related("lease__user__profile", "lease__card_model", "environment")
        .filter(pk=session_id, status=SessionStatus.STARTING)
        .first()
    )
    if session is None or session.lease.status != LeaseStatus.ACTIVE:
        return ""
    lease = session.lease
    holding = holding_of(lease)
    backend = get_backend(holding=holding)
    spec = SessionSpec(
        session_id=session.pk,
        host=session.host,
        port=session.port,
        script=sessions.session_script(session, lease, _devices(lease, session.host)),
    )
    try:
        placement = backend.session_start(holding, spec)
    except TransientBackendError:
        raise
    except BackendError as exc:
        sessions.session_failed(session_id=session.pk, reason=str(exc))
        return ""
    Session.objects.filter(pk=session.pk).update(backend=backend.name, placement=placement)
    if placement.get("by") == "agent":
        return "agent"
    if placement.get("address"):
        Session.objects.filter(pk=session.pk).update(address=placement["address"])
    return "check"


def session_check_step(*, session_id: int) -> bool | None:
    """Probe a started session: True when it answers (now running), False when it failed or
    took too long, None to probe again later."""
    session = Session.objects.filter(pk=session_id).first()
    if session is None or session.status != SessionStatus.STARTING:
        return False
    url = f"http://{session.address or session.host}:{session.port}{session.base_url}api/status"
    request = urllib.request.Request(url, headers={"Authorization": f"token {session.token}"})
    try:
        with urllib.request.urlopen(request, timeout=3) as answer:  # noqa: S310 - http to a node
            if answer.status == 200:
                return sessions.session_running(
                    session_id=session.pk, address=session.address or session.host
                )
    except (urllib.error.URLError, OSError, ValueError):
        pass
    limit = timedelta(seconds=settings.CARDPOOL_SESSIONS["START_TIMEOUT"])
    if timezone.now() - session.created_at > limit:
        sessions.session_failed(session_id=session.pk, reason=_log_tail(session), kind="exited")
        return False
    return None


def _log_tail(session: Session) -> str:
    path = (session.placement or {}).get("log")
    text = ""
    if path:
        try:
            with open(path, "rb") as log:
                text = log.read()[-1500:].decode(errors="replace")
        except OSError:
            text = ""
    return "JupyterLab did not answer in time." + (f"\n{text}" if text else "")


def session_stop_step(*, session_id: int) -> None:
    """Stop the process of a session that has ended (stopped early). A session that ends
    with its lease is stopped by the lease's release (the job is cancelled, or the agent
    drops it)."""
    session = Session.objects.select_related("lease__user__profile", "lease__card_model").get(
        pk=session_id
    )
    if session.status in (SessionStatus.STARTING, SessionStatus.RUNNING):
        return
    holding = holding_of(session.lease)
    get_backend(name=session.backend or None, holding=holding).session_stop(
        holding, session.placement or {}
    )


def sessions_sweep(*, now=None) -> dict:
    """Sessions still starting past the start timeout fail (an agent that never answered, a
    lost task); live sessions of leases that are no longer active end (belt and braces
    beside ``release_begin``)."""
    now = now or timezone.now()
    limit = now - timedelta(seconds=settings.CARDPOOL_SESSIONS["START_TIMEOUT"])
    failed = 0
    for session_id in Session.objects.filter(
        status=SessionStatus.STARTING, created_at__lt=limit
    ).values_list("pk", flat=True)[:100]:
        failed += sessions.session_failed(
            session_id=session_id, reason="The session did not answer in time.", kind="no_answer"
        )
    ended = 0
    for lease_id in (
        Session.objects.live()
        .exclude(lease__status=LeaseStatus.ACTIVE)
        .values_list("lease_id", flat=True)
        .distinct()[:100]
    ):
        ended += Session.objects.end_for_lease(lease_id, at=now)
    return {"failed": failed, "ended": ended}
