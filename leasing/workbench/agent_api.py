"""What a node's cardpool-agent must make true on its node, and what it reports back.

``GET /api/v1/agent/work/`` (node token): the sessions that should run there (with the
script to run as the holder) and the SSH keys that should be allowed, per user and lease.
The agent starts what is missing, stops what is no longer listed, rewrites its marked
``authorized_keys`` lines, then ``POST /api/v1/agent/sessions/`` says which sessions answer
(and at which address) or failed. Desired state, not commands: a lost answer or a restarted
agent converges on the next round, and the release path needs no call to the node.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.urls import path
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory.api_telemetry import IsNodeAgent, NodeRateThrottle, NodeTokenAuthentication
from leasing.choices import LeaseStatus
from leasing.models import Lease, Session, SessionStatus, SshKey
from leasing.workbench import accounts, keys, offers, sessions
from leasing.workbench.addresses import session_address_check
from portal.input import StrictSerializer


def node_work(node) -> dict:
    """The sessions and keys *node*'s agent must keep (only leases handed over by the agent:
    the local backend's)."""
    leases = [
        lease
        for lease in Lease.objects.filter(status=LeaseStatus.ACTIVE)
        .filter(allocations__card__node=node)
        .select_related("user", "team", "user__profile", "environment", "card_model")
        .distinct()
        if (lease.access or {}).get("backend") == "local"
    ]
    by_id = {lease.pk: lease for lease in leases}
    work_sessions = []
    for session in (
        Session.objects.live()
        .filter(lease_id__in=list(by_id), host=node.hostname)
        .select_related("environment")
        .order_by("pk")
    ):
        lease = by_id[session.lease_id]
        here = _on(lease, node)
        devices = here.get("env", {})
        work_sessions.append(
            {
                "id": session.pk,
                **accounts.account_item(lease.user),
                "port": session.port,
                "state": session.status,
                "script": sessions.session_script(session, lease, devices),
                "fence": _fence(lease, here),
            }
        )
    user_keys: dict[int, list[str]] = {}
    for key in SshKey.objects.filter(user_id__in={lease.user_id for lease in leases}):
        user_keys.setdefault(key.user_id, []).append(key.public_key)
    work_keys = [
        {
            **accounts.account_item(lease.user),
            "lease": lease.pk,
            "fence": _fence(lease, _on(lease, node)),
            "lines": [
                keys.authorized_line(k, lease_id=lease.pk, until=lease.end_at)
                for k in user_keys.get(lease.user_id, [])
            ],
        }
        for lease in leases
    ]
    return {"node": node.hostname, "sessions": work_sessions, "keys": work_keys}


def _on(lease: Lease, node) -> dict:
    """The lease's access details on *node*."""
    return next(
        (n for n in (lease.access or {}).get("nodes", []) if n.get("host") == node.hostname), {}
    )


def _fence(lease: Lease, here: dict) -> dict:
    """What the agent fences a session, a key's login or a checkpoint into: the leased
    cards' indices on this node and their vendor (the agent knows their device files)."""
    return {"vendor": lease.card_model.vendor, "devices": list(here.get("devices") or [])}


class ReportItem(StrictSerializer):
    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=["running", "failed"])
    kind = serializers.ChoiceField(choices=list(sessions.FAILURES), required=False)
    address = serializers.CharField(max_length=64, required=False, allow_blank=True)
    message = serializers.CharField(max_length=2000, required=False, allow_blank=True)


class ReportSerializer(StrictSerializer):
    sessions = ReportItem(many=True)


class AccountsSerializer(StrictSerializer):
    accounts = serializers.ListField(
        child=serializers.CharField(max_length=64), max_length=10000, allow_empty=True
    )


class AgentAccountsView(APIView):
    """The agent names the accounts it created; the answer: those whose person has left."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes = [NodeRateThrottle]

    @extend_schema(operation_id="agent_accounts", request=AccountsSerializer, responses={200: dict})
    def post(self, request):
        serializer = AccountsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return Response({"leavers": accounts.leavers(serializer.validated_data["accounts"])})


class AgentWorkView(APIView):
    """The sessions and SSH keys this node's agent must keep."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes = [NodeRateThrottle]

    @extend_schema(operation_id="agent_work", responses={200: dict})
    def get(self, request):
        """``?can=jupyterlab,terminal,desktop,keys,fence&gl=llvmpipe``: what the node can
        run (offers.record); an agent that says nothing changes nothing."""
        if "can" in request.query_params:
            can = [c for c in request.query_params["can"].split(",") if c][:20]
            offers.record(request.auth, can=can, gl=request.query_params.get("gl", ""))
        return Response(node_work(request.auth))


class AgentSessionsView(APIView):
    """The agent reports sessions that answer (running) or could not start (failed)."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes = [NodeRateThrottle]

    @extend_schema(operation_id="agent_sessions", request=ReportSerializer, responses={200: dict})
    def post(self, request):
        serializer = ReportSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        node = request.auth
        changed = 0
        for item in serializer.validated_data["sessions"]:
            own = Session.objects.filter(
                pk=item["id"], host=node.hostname, status=SessionStatus.STARTING
            ).exists()
            if not own:
                continue
            if item["state"] == "running":
                port = Session.objects.values_list("port", flat=True).get(pk=item["id"])
                try:
                    address = session_address_check(
                        node=node, address=item.get("address") or node.hostname, port=port
                    )
                except ValidationError as exc:
                    changed += sessions.session_failed(
                        session_id=item["id"], reason=exc.messages[0]
                    )
                    continue
                changed += sessions.session_running(session_id=item["id"], address=address)
            else:
                reason = item.get("message") or str(_("The session did not start."))
                changed += sessions.session_failed(
                    session_id=item["id"], reason=reason, kind=item.get("kind") or "exited"
                )
        return Response({"changed": changed})


urlpatterns = [
    path("agent/work/", AgentWorkView.as_view(), name="api-agent-work"),
    path("agent/sessions/", AgentSessionsView.as_view(), name="api-agent-sessions"),
    path("agent/accounts/", AgentAccountsView.as_view(), name="api-agent-accounts"),
]
