"""The ``kubernetes`` backend: a lease is a pod on the vendor's device-plugin resource.

For each node of the holding, a pod in the team's namespace (``<NAMESPACE_PREFIX><team>``)
asks for the lease's count of the card model's extended resource (``nvidia.com/gpu``,
``huawei.com/Ascend910``, …; kubernetes_manifests.default_resource), bound to the planned
node by *required node affinity* — not ``nodeName``, which bypasses the scheduler and its
admission — with the PriorityClass mirroring the lease's priority (``preemptionPolicy:
Never``: the portal decides preemption). It runs the lease's environment image (or the holder
image for "cards only") as the holder's mapped Unix uid, and holds the cards until deleted.
The device plugin chooses the devices: Cardpool's allocation rows name cards for the
planner, but on Kubernetes the lease records counts only (docs/decisions.md).

Access: the sessions gate (JupyterLab, a terminal) runs in the pod through ``exec``; for
``kubectl exec`` the holder gets a per-lease ServiceAccount token allowed only ``pods/exec``
on the lease's pods, bound to the pod and revoked at the release (the ServiceAccount is
deleted).

Every call is idempotent on the lease id: a pod's name is ``lease-<id>-<node and count
digest>``, so a repeated call finds it (409 on create) instead of making a second one, and
a change (a resize) is a new name: the replacement is made first, then the old pod deleted.

About 610 lines: the one class holds the whole Backend interface for pods plus what the
mirror and reconciler ask of the cluster; the client is in ``kubernetes_api``, the manifests
in ``kubernetes_manifests`` and the node import in ``kubernetes_sync``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import pwd
import shlex
import time
from datetime import datetime

import yaml
from django.utils import timezone

from leasing.backends import kubernetes_manifests as m
from leasing.backends.base import (
    Backend,
    Holding,
    NodeCards,
    PermanentBackendError,
    SessionSpec,
    TransientBackendError,
)
from leasing.backends.kubernetes_api import (
    ApiError,
    KubeApi,
    kubernetes_settings,
    parse_pairs,
    permanent,
    why_pending,
)
from leasing.backends.kubernetes_api import phase as pod_phase
from leasing.choices import PRIORITY_RANK

logger = logging.getLogger(__name__)

# The holder process of every lease pod: waits for the end, exits at once on SIGTERM.
HOLD_COMMAND = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]


def namespace_for(team: str, config: dict | None = None) -> str:
    config = config or kubernetes_settings()
    return m.dns_label(f"{config['NAMESPACE_PREFIX']}{team or 'default'}")


def resource_for(
    card_model_slug: str, vendor: str, node: NodeCards | None = None, config: dict | None = None
) -> str:
    """The extended resource of a card model: the node's ``kubernetes:resource:<slug>`` label
    (written by sync_kubernetes), else CARDPOOL_KUBERNETES["RESOURCES"], else the vendor's
    default (kubernetes_manifests.VENDOR_RESOURCES)."""
    config = config or kubernetes_settings()
    labels = (node.labels if node is not None else None) or {}
    return (
        labels.get(f"kubernetes:resource:{card_model_slug}")
        or config["RESOURCES"].get(card_model_slug)
        or m.default_resource(vendor, card_model_slug)
    )


def unix_ids(username: str) -> tuple[int, int]:
    """The holder's mapped Unix account as (uid, gid), from the portal host's user database
    (the same directory the nodes use, as with Slurm)."""
    try:
        entry = pwd.getpwnam(username)
    except KeyError as exc:
        raise PermanentBackendError(
            f"There is no Unix user {username} to run the lease's pod as; ask an operator to "
            "map your account."
        ) from exc
    return entry.pw_uid, entry.pw_gid


class KubernetesBackend(Backend):
    name = "kubernetes"

    def __init__(self, api: KubeApi | None = None, config: dict | None = None):
        self.config = config or kubernetes_settings()
        self._api = api

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = KubeApi(self.config)
        return self._api

    # --- names ---------------------------------------------------------------------------

    def namespace(self, holding: Holding) -> str:
        return namespace_for(holding.team, self.config)

    def wanted(self, holding: Holding) -> dict[str, NodeCards]:
        """{pod name: the node and cards it holds} for the holding's current cards."""
        pods = {}
        for place in holding.nodes:
            digest = hashlib.sha256(f"{place.hostname}/{len(place.indices)}".encode()).hexdigest()
            pods[f"{m.pod_name(holding.lease_id)}-{digest[:8]}"] = place
        return pods

    def pods(self, holding: Holding) -> list[dict]:
        """The lease's pods in its namespace (any phase), by name."""
        found = self.api.call(
            self.api.core.list_namespaced_pod,
            self.namespace(holding),
            label_selector=f"{m.LABEL_LEASE}={holding.lease_id}",
        )
        return sorted(found.get("items", []), key=lambda p: p["metadata"]["name"])

    # --- interface -----------------------------------------------------------------------

    def provision(self, holding: Holding) -> dict:
        self._check_time(holding)
        namespace = self.ensure_namespace(holding)
        self.ensure_priority_class(holding.priority or "normal")
        wanted = self.wanted(holding)
        have = {p["metadata"]["name"]: p for p in self.pods(holding)}
        for name in have:
            if name not in wanted:  # an earlier call's pod for other cards (a change raced it)
                self._delete_pod(namespace, name)
        for name, place in wanted.items():
            if name not in have or pod_phase(have[name]) == "Terminating":
                self._create_pod(holding, namespace, name, place)
        self._wait_running(holding, namespace, list(wanted))
        return self.access(holding)

    def release(self, holding: Holding) -> None:
        """Delete the lease's pods and its exec access, then wait until the pods are gone (the
        cards are free only then); pods still terminating after WAIT_SECONDS are a transient
        error, so the release is tried again."""
        namespace = self.namespace(holding)
        for pod in self.pods(holding):
            self._delete_pod(namespace, pod["metadata"]["name"])
        self._revoke_access(holding)
        self._wait_gone(holding, namespace)

    def status(self, holding: Holding) -> str:
        pods = self.pods(holding)
        if not pods:
            return "released"
        return "active" if all(pod_phase(p) == "Running" for p in pods) else "unknown"

    def checkpoint(self, holding: Holding, *, signal: str, command: str) -> dict:
        """The declared signal to every process of the pod but its holder (``kill -s SIG -1``
        through ``exec``), and/or the declared command run in the pod; the grace that follows
        ends with the pod's deletion (SIGTERM, then ``terminationGracePeriodSeconds``)."""
        namespace = self.namespace(holding)
        running = [p["metadata"]["name"] for p in self.pods(holding) if pod_phase(p) == "Running"]
        if not running:
            raise PermanentBackendError("The lease's pods are gone; nothing to signal.")
        done: dict = {"via": "kubernetes", "pods": running}
        for name in running:
            if signal:
                # The shell's kill (busybox's too): -1 is every process but itself and PID 1.
                kill = f"kill -s {shlex.quote(signal)} -1"
                rc, _ = self.api.exec(namespace, name, ["/bin/sh", "-c", kill])
                done["signal"] = signal
                done.setdefault("signal_rc", []).append(rc)
            if command:
                rc, _ = self.api.exec(namespace, name, ["/bin/sh", "-c", command])
                done.setdefault("command_rc", []).append(rc)
        return done

    def change_restarts(self, holding: Holding) -> bool:
        """Whether ``change`` will replace a pod (its node or count changed): whatever runs
        in it restarts, so the holder is told first (lifecycle.provisioning.change_step). A
        swapped card on the same node changes no pod: the device plugin chose the devices."""
        have = {p["metadata"]["name"] for p in self.pods(holding) if pod_phase(p) != "Terminating"}
        return have != set(self.wanted(holding))

    def change(self, holding: Holding) -> dict:
        """Make the lease's pods hold exactly the holding's cards. A running pod's resources
        cannot change, so a pod whose node and count still match is kept and any other is
        replaced: the new pod first, then the old one deleted — the mirrored ResourceQuota
        leaves room for one replacement. Where the node cannot hold both (a full node, or the
        quota), the old pod goes first. Idempotent: a second call finds the pods matching."""
        self._check_time(holding)
        namespace = self.ensure_namespace(holding)
        wanted = self.wanted(holding)
        have = {p["metadata"]["name"]: p for p in self.pods(holding)}
        old = [n for n, p in have.items() if n not in wanted and pod_phase(p) != "Terminating"]
        new = [n for n in wanted if n not in have or pod_phase(have[n]) == "Terminating"]
        try:
            for name in new:
                self._create_pod(holding, namespace, name, wanted[name])
            if new:
                self._wait_running(holding, namespace, new, fail_unschedulable=False)
        except TransientBackendError:
            if not old:
                raise
            logger.info("lease %s: no room beside the old pod; replacing it", holding.lease_id)
            for name in old:
                self._delete_pod(namespace, name)
            old = []
            self._wait_gone(holding, namespace, keep=set(wanted))
            for name in new:
                if self.api.read(self.api.core.read_namespaced_pod, name, namespace) is None:
                    self._create_pod(holding, namespace, name, wanted[name])
            self._wait_running(holding, namespace, new)
        for name in old:
            self._delete_pod(namespace, name)
        return self.access(holding)

    # --- sessions ------------------------------------------------------------------------

    def session_start(self, holding: Holding, spec: SessionSpec) -> dict:
        """Run the session in the lease's pod on *spec.host*, detached, through ``exec``;
        the proxy reaches it at the pod's IP. Deleting the pod (the release) ends it."""
        namespace = self.namespace(holding)
        pod = self._running_pod_on(holding, spec.host)
        ip = pod.get("status", {}).get("podIP", "")
        base = f"/tmp/cardpool-session-{spec.session_id}"  # noqa: S108 - inside the pod
        # The script (its token) comes on stdin, read by byte count (the channel protocol
        # has no end-of-input), so it is in no request line, audit log or process list.
        # Started already (a retried task): nothing more.
        script = f"export CARDPOOL_SESSION_IP={ip}\n{spec.script}".encode()
        launch = (
            f"umask 077; if [ -f {base}.pid ] && kill -0 $(cat {base}.pid) 2>/dev/null; "
            f"then exit 0; fi; head -c {len(script)} > {base}.sh && "
            f"(nohup /bin/bash {base}.sh > {base}.log 2>&1 & echo $! > {base}.pid)"
        )
        rc, output = self.api.exec(
            namespace, pod["metadata"]["name"], ["/bin/sh", "-c", launch], stdin=script.decode()
        )
        if rc != 0:
            raise TransientBackendError(f"The session did not start in the pod: {output[-300:]}")
        return {
            "pod": pod["metadata"]["name"],
            "namespace": namespace,
            "address": ip,
            "session_id": spec.session_id,
        }

    def session_stop(self, holding: Holding, placement: dict) -> None:
        pod, namespace = placement.get("pod"), placement.get("namespace")
        if not pod or not namespace:
            return
        base = f"/tmp/cardpool-session-{placement.get('session_id', '')}"  # noqa: S108
        try:
            self.api.exec(namespace, pod, ["/bin/sh", "-c", f"kill $(cat {base}.pid) || true"])
        except ApiError as exc:
            if exc.status != 404:  # the pod is gone: so is the session
                raise

    # --- namespaces, priority classes, exec access ---------------------------------------

    def ensure_namespace(self, holding: Holding) -> str:
        """The team's namespace (made here when the mirror has not run yet)."""
        name = self.namespace(holding)
        self.api.create(self.api.core.create_namespace, body=m.namespace(name, team=holding.team))
        return name

    def ensure_priority_class(self, priority: str) -> None:
        """The lease's PriorityClass (made here when the mirror has not run yet)."""
        self.api.create(
            self.api.scheduling.create_priority_class,
            body=m.priority_class(
                priority,
                value=PRIORITY_RANK.get(priority, 0),
                description=f"Cardpool leases of priority {priority}",
            ),
        )

    def access(self, holding: Holding) -> dict:
        """How to use the cards: the pod per node, the resource and count, and a kubeconfig
        whose token may only exec into those pods."""
        namespace = self.namespace(holding)
        wanted = self.wanted(holding)
        pods = {p["metadata"]["name"]: p for p in self.pods(holding)}
        nodes = []
        for name, place in sorted(wanted.items(), key=lambda item: item[1].hostname):
            nodes.append(
                {
                    "host": place.hostname,
                    "pod": name,
                    "cards": len(place.indices),
                    "resource": resource_for(
                        holding.card_model_slug, holding.vendor, place, self.config
                    ),
                    # The device plugin chose the devices; the container sees only those.
                    "devices": [],
                    "env": {},
                    "shell": f"kubectl --kubeconfig lease-{holding.lease_id}.yaml exec -it "
                    f"-n {namespace} {name} -- /bin/sh",
                }
            )
        token = self._grant_access(holding, namespace, sorted(wanted), pods)
        return {
            "backend": "kubernetes",
            "namespace": namespace,
            "pods": sorted(wanted),
            "env_var": holding.devices_env,
            "nodes": nodes,
            "service_account": m.access_name(holding.lease_id),
            "kubeconfig": self._kubeconfig(holding, namespace, token),
        }

    def _grant_access(
        self, holding: Holding, namespace: str, pod_names: list[str], pods: dict
    ) -> str:
        name = m.access_name(holding.lease_id)
        labels = m.lease_labels(holding.lease_id, holding.username, holding.team)
        api = self.api
        api.create(
            api.core.create_namespaced_service_account,
            namespace,
            body=m.service_account(name, namespace, labels),
        )
        role = m.exec_role(name, namespace, labels, pod_names=pod_names)
        if api.create(api.rbac.create_namespaced_role, namespace, body=role) is None:
            api.call(api.rbac.replace_namespaced_role, name, namespace, body=role)
        api.create(
            api.rbac.create_namespaced_role_binding,
            namespace,
            body=m.exec_role_binding(name, namespace, labels),
        )
        first = pods.get(pod_names[0], {}) if pod_names else {}
        answer = api.call(
            api.core.create_namespaced_service_account_token,
            name,
            namespace,
            body=m.token_request(
                seconds=self.config["TOKEN_SECONDS"],
                pod_name_=first.get("metadata", {}).get("name", ""),
                pod_uid=first.get("metadata", {}).get("uid", ""),
            ),
        )
        return answer.get("status", {}).get("token", "")

    def _revoke_access(self, holding: Holding) -> None:
        """Deleting the ServiceAccount invalidates every token issued for it."""
        name, namespace, api = m.access_name(holding.lease_id), self.namespace(holding), self.api
        api.delete(api.rbac.delete_namespaced_role_binding, name, namespace)
        api.delete(api.rbac.delete_namespaced_role, name, namespace)
        api.delete(api.core.delete_namespaced_service_account, name, namespace)

    def _kubeconfig(self, holding: Holding, namespace: str, token: str) -> str:
        server = self.config["SERVER_URL"] or self.api.host
        name = f"cardpool-lease-{holding.lease_id}"
        cluster: dict = {"server": server}
        ca_file = self.api.client.configuration.ssl_ca_cert
        if ca_file and os.path.exists(ca_file):  # the cluster's CA, as the portal trusts it
            with open(ca_file, "rb") as ca:
                cluster["certificate-authority-data"] = base64.b64encode(ca.read()).decode()
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": name, "cluster": cluster}],
                "users": [{"name": name, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": name,
                        "context": {"cluster": name, "user": name, "namespace": namespace},
                    }
                ],
                "current-context": name,
            },
            sort_keys=False,
        )

    # --- the mirror and the reconciler (leasing.lifecycle.kubernetes) --------------------

    def lease_pods(self) -> list[dict]:
        """Every pod Cardpool made, in every namespace (the reconciler's view)."""
        found = self.api.call(
            self.api.core.list_pod_for_all_namespaces,
            label_selector=f"{m.LABEL_MANAGED}={m.MANAGED_BY}",
        )
        return [p for p in found.get("items", []) if m.LABEL_LEASE in p["metadata"]["labels"]]

    def nodes(self) -> list[dict]:
        return self.api.call(self.api.core.list_node).get("items", [])

    def delete_pod(self, namespace: str, name: str) -> bool:
        return self.api.delete(self.api.core.delete_namespaced_pod, name, namespace)

    def mirror_quota(self, *, team: str, hard_cards: dict[str, int]) -> bool:
        """The team's namespace and its ResourceQuota with *hard_cards* per resource; True
        when something was written (an unchanged quota is left alone)."""
        name = namespace_for(team, self.config)
        api = self.api
        api.create(api.core.create_namespace, body=m.namespace(name, team=team))
        body = m.resource_quota(name, hard_cards=hard_cards)
        have = api.read(api.core.read_namespaced_resource_quota, "cardpool", name)
        if have is None:
            return (
                api.create(api.core.create_namespaced_resource_quota, name, body=body) is not None
            )
        if have.get("spec", {}).get("hard", {}) == body["spec"]["hard"]:
            return False
        body["metadata"]["resourceVersion"] = have["metadata"]["resourceVersion"]
        api.call(api.core.replace_namespaced_resource_quota, "cardpool", name, body=body)
        return True

    def mirror_priority_classes(self, values: dict[str, int]) -> list[str]:
        """One PriorityClass per portal priority (value = its rank; Never preempts); a value
        that changed is deleted and made again (the field is immutable), one no longer used
        is deleted. Answers the names written."""
        api = self.api
        have = {
            pc["metadata"]["name"]: pc
            for pc in api.call(
                api.scheduling.list_priority_class,
                label_selector=f"{m.LABEL_MANAGED}={m.MANAGED_BY}",
            ).get("items", [])
        }
        written = []
        for priority, value in sorted(values.items()):
            body = m.priority_class(
                priority, value=value, description=f"Cardpool leases of priority {priority}"
            )
            name = body["metadata"]["name"]
            old = have.pop(name, None)
            if old is not None:
                if old.get("value") == value and old.get("preemptionPolicy") == "Never":
                    if old.get("description") == body["description"]:
                        continue
                    body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
                    api.call(api.scheduling.replace_priority_class, name, body=body)
                    written.append(name)
                    continue
                api.delete(api.scheduling.delete_priority_class, name)
            api.create(api.scheduling.create_priority_class, body=body)
            written.append(name)
        for name in sorted(have):
            api.delete(api.scheduling.delete_priority_class, name)
            written.append(name)
        return written

    # --- pods ----------------------------------------------------------------------------

    def _create_pod(self, holding: Holding, namespace: str, name: str, place: NodeCards) -> None:
        resource = resource_for(holding.card_model_slug, holding.vendor, place, self.config)
        if not resource:
            raise PermanentBackendError(
                f"No Kubernetes resource is known for card model {holding.card_model_slug}; "
                "set CARDPOOL_KUBERNETES_RESOURCES."
            )
        uid = gid = None
        if self.config["RUN_AS"] == "mapped":
            uid, gid = unix_ids(holding.slurm_user)
        image = self.config["IMAGES"].get(holding.environment) or self.config["HOLDER_IMAGE"]
        body = m.pod(
            name=name,
            namespace_name=namespace,
            lease_id=holding.lease_id,
            username=holding.username,
            team=holding.team,
            node=place.hostname,
            resource=resource,
            count=len(place.indices),
            image=image,
            priority=holding.priority or "normal",
            grace_seconds=self.config["GRACE_SECONDS"],
            uid=uid,
            gid=gid,
            env={"CARDPOOL_LEASE": str(holding.lease_id), "CARDPOOL_USER": holding.slurm_user},
            command=HOLD_COMMAND,
            node_label=self.config["NODE_LABEL"],
        )
        try:
            made = self.api.create(self.api.core.create_namespaced_pod, namespace, body=body)
        except ApiError as exc:
            if exc.quota_exceeded:
                raise TransientBackendError(
                    f"The team's ResourceQuota has no room for {len(place.indices)} "
                    f"{resource} now: {exc.message}"
                ) from exc
            if 400 <= exc.status < 500 and exc.status not in (408, 429):
                raise permanent(exc, f"the pod for lease {holding.lease_id}") from exc
            raise
        if made is not None:
            logger.info(
                "lease %s: pod %s/%s on %s asks %s=%s",
                holding.lease_id,
                namespace,
                name,
                place.hostname,
                resource,
                len(place.indices),
            )

    def _delete_pod(self, namespace: str, name: str) -> None:
        self.api.delete(self.api.core.delete_namespaced_pod, name, namespace)

    def _running_pod_on(self, holding: Holding, host: str) -> dict:
        for pod in self.pods(holding):
            if pod_phase(pod) == "Running" and pod.get("spec", {}).get("nodeName") == host:
                return pod
        raise TransientBackendError(f"The lease has no running pod on {host} yet.")

    def _wait_running(
        self, holding: Holding, namespace: str, names: list[str], *, fail_unschedulable=True
    ) -> None:
        """Watch until every pod in *names* runs. A pod that failed, or one the scheduler has
        not placed SCHEDULE_SECONDS after it was made, is deleted and the hand-over fails for
        good with the reason; one still coming after WAIT_SECONDS is a transient error."""
        deadline = time.monotonic() + self.config["WAIT_SECONDS"]
        pending: dict[str, dict] = {}
        while True:
            pods = {p["metadata"]["name"]: p for p in self.pods(holding)}
            pending = {n: pods.get(n, {}) for n in names if pod_phase(pods.get(n, {})) != "Running"}
            if not pending:
                return
            for name, pod in pending.items():
                phase = pod_phase(pod)
                if phase in ("Failed", "Succeeded"):
                    self._delete_pod(namespace, name)
                    status = pod.get("status", {})
                    why = status.get("reason") or status.get("message") or why_pending(pod)
                    raise PermanentBackendError(
                        f"The lease's pod {name} ended at once ({phase}): {why}"
                    )
                if fail_unschedulable and phase == "Pending" and self._overdue(pod):
                    for other in names:
                        self._delete_pod(namespace, other)
                    raise PermanentBackendError(
                        f"Kubernetes did not place the lease's pod on {self._node_of(pod)} within "
                        f"{self.config['SCHEDULE_SECONDS']} s: {why_pending(pod)}"
                    )
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for _type, obj in self.api.watch(
                self.api.core.list_namespaced_pod,
                namespace,
                label_selector=f"{m.LABEL_LEASE}={holding.lease_id}",
                timeout=max(1, int(left)),
            ):
                if obj.get("metadata", {}).get("name") in pending:
                    break  # something changed: look again
        why = "; ".join(f"{n}: {why_pending(p)}" for n, p in sorted(pending.items()))
        raise TransientBackendError(f"The lease's pod is not running yet ({why}).")

    def _wait_gone(self, holding: Holding, namespace: str, keep: set[str] | None = None) -> None:
        keep = keep or set()
        deadline = time.monotonic() + self.config["WAIT_SECONDS"]
        while True:
            left_over = [p["metadata"]["name"] for p in self.pods(holding)]
            left_over = [n for n in left_over if n not in keep]
            if not left_over:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransientBackendError(
                    f"The lease's pods {', '.join(left_over)} are still terminating."
                )
            for type_, obj in self.api.watch(
                self.api.core.list_namespaced_pod,
                namespace,
                label_selector=f"{m.LABEL_LEASE}={holding.lease_id}",
                timeout=max(1, int(left)),
            ):
                if type_ == "DELETED" and obj.get("metadata", {}).get("name") in left_over:
                    break

    def _overdue(self, pod: dict) -> bool:
        made = pod.get("metadata", {}).get("creationTimestamp")
        if not made:
            return False
        made_at = datetime.fromisoformat(made.replace("Z", "+00:00"))
        return (timezone.now() - made_at).total_seconds() > self.config["SCHEDULE_SECONDS"]

    @staticmethod
    def _node_of(pod: dict) -> str:
        terms = (
            pod.get("spec", {})
            .get("affinity", {})
            .get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms", [])
        )
        for term in terms:
            for expr in term.get("matchExpressions", []):
                return ",".join(expr.get("values", []))
        return "?"

    @staticmethod
    def _check_time(holding: Holding) -> None:
        if holding.end_at <= timezone.now():
            raise PermanentBackendError("The lease ended before its cards could be handed over.")


__all__ = [
    "ApiError",
    "KubeApi",
    "KubernetesBackend",
    "kubernetes_settings",
    "namespace_for",
    "parse_pairs",
    "resource_for",
]
