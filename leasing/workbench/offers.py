"""What a lease's holder may open on it — JupyterLab, a terminal, a desktop, SSH keys — and,
for each thing not offered, why, in the reader's language.

A local-backend node says what it can run: its ``cardpool-agent --sessions`` reports it with
every round (``GET /api/v1/agent/work/?can=…&gl=…``, kept on ``Node.session_offers``). A node
no agent reports from offers nothing (the plain demo has no agent: no button spins for two
minutes). Slurm nodes run JupyterLab and its terminals through the worker; the desktop is
the agent's only. The lease page, the API and ``sessions.session_open`` ask here.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone
from django.utils.translation import gettext as _

from inventory.models import Node
from leasing.choices import LeaseStatus

KINDS = ("lab", "terminal", "desktop", "keys")
# What the agent reports (its capability names), per kind.
NEEDS = {"lab": "jupyterlab", "terminal": "terminal", "desktop": "desktop", "keys": "keys"}


@dataclass(frozen=True)
class Offer:
    kind: str
    ok: bool
    reason: str = ""  # why not, and what to do (when not ok)
    note: str = ""  # what to know when it is (the desktop's renderer)


def record(node: Node, *, can: list[str], gl: str = "") -> bool:
    """Keep what *node*'s agent says it can run (written only when it changed)."""
    wanted = {"can": sorted(set(can)), "gl": gl[:40]}
    if {k: node.session_offers.get(k) for k in wanted} == wanted:
        return False
    wanted["at"] = timezone.now().isoformat(timespec="seconds")
    Node.objects.filter(pk=node.pk).update(session_offers=wanted)
    node.session_offers = wanted
    return True


def _node_of(lease) -> Node | None:
    hosts = [n.get("host") for n in (lease.access or {}).get("nodes", []) if n.get("host")]
    return Node.objects.filter(hostname=hosts[0]).first() if hosts else None


def _renderer_note(gl: str) -> str:
    if gl and gl != "llvmpipe":
        return _("OpenGL and Vulkan use the card here (the %(vendor)s EGL driver).") % {
            "vendor": gl
        }
    return _(
        "OpenGL renders on the CPU here (Mesa llvmpipe): fine for a window or a plot, slow for "
        "3D. Ask an operator for VirtualGL if you need the card to draw."
    )


def lease_offers(lease) -> dict[str, Offer]:
    """{kind: Offer} for *lease* now."""
    if lease.status != LeaseStatus.ACTIVE:
        why = _("Sessions can be opened only while the lease is active.")
        return {kind: Offer(kind, False, why) for kind in KINDS}
    access = lease.access or {}
    node = _node_of(lease)
    host = node.hostname if node else "?"
    graphics = bool(getattr(lease.card_model, "graphics", False))
    no_graphics = _(
        "The desktop is offered on graphics-capable cards only; %(model)s has no graphics "
        "pipeline. Lease a graphics card for it."
    ) % {"model": lease.card_model.name}
    if access.get("backend") == "slurm":
        offers = {kind: Offer(kind, True) for kind in ("lab", "terminal", "keys")}
        offers["desktop"] = Offer(
            "desktop",
            False,
            _("The desktop runs on nodes with the Cardpool agent; %(node)s is run by Slurm.")
            % {"node": host},
        )
        return offers
    reported = (node.session_offers if node else {}) or {}
    if not reported:
        why = _(
            "No session agent runs on %(node)s, so nothing can be opened there. Ask an "
            "operator to run cardpool-agent --sessions on it."
        ) % {"node": host}
        return {kind: Offer(kind, False, why) for kind in KINDS}
    can = set(reported.get("can") or [])
    reasons = {
        "lab": _(
            "JupyterLab is not installed on %(node)s. Ask an operator to install it there "
            "(pip install 'cardpool[sessions]')."
        ),
        "terminal": _(
            "Terminals need JupyterLab on %(node)s, which it lacks. Use SSH, or ask an "
            "operator to install JupyterLab there."
        ),
        "desktop": _(
            "The desktop needs TigerVNC, websockify and noVNC on %(node)s. Ask an operator to "
            "install them (apt-get install tigervnc-standalone-server websockify novnc)."
        ),
        "keys": _(
            "SSH logins are not set up on %(node)s (no SSH server, or the agent cannot write "
            "your keys). Use the browser session, or ask an operator."
        ),
    }
    offers = {}
    for kind in KINDS:
        if kind == "desktop" and not graphics:
            offers[kind] = Offer(kind, False, no_graphics)
        elif NEEDS[kind] in can:
            note = _renderer_note(str(reported.get("gl") or "")) if kind == "desktop" else ""
            offers[kind] = Offer(kind, True, note=note)
        else:
            offers[kind] = Offer(kind, False, reasons[kind] % {"node": host})
    return offers
