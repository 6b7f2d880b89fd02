"""The Kubernetes API as the ``kubernetes`` backend sees it: its settings and one client
(the official ``kubernetes`` package) that answers plain dicts and turns the API's refusals
into Transient (retry) or Permanent (say why) errors. The client is imported only when a
backend first talks to the cluster, so sites without the ``kubernetes`` extra never need it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable

from django.conf import settings

from leasing.backends.base import PermanentBackendError, TransientBackendError

logger = logging.getLogger(__name__)


def kubernetes_settings() -> dict:
    """CARDPOOL_KUBERNETES with its defaults (tests override single keys)."""
    defaults = {
        "KUBECONFIG": "",
        "CONTEXT": "",
        "NAMESPACE_PREFIX": "cardpool-",
        "RESOURCES": {},
        "IMAGES": {},
        "HOLDER_IMAGE": "docker.io/library/busybox:1.36",
        "NODE_LABEL": "kubernetes.io/hostname",
        "RUN_AS": "mapped",
        "GRACE_SECONDS": 30,
        "WAIT_SECONDS": 20,
        "SCHEDULE_SECONDS": 120,
        "REQUEST_TIMEOUT": 15,
        "TOKEN_SECONDS": 30 * 24 * 3600,
        "SERVER_URL": "",
        "REGION": "kubernetes",
    }
    return {**defaults, **getattr(settings, "CARDPOOL_KUBERNETES", {})}


def parse_pairs(text: str) -> dict[str, str]:
    """``a100=nvidia.com/gpu,ascend-910b=huawei.com/Ascend910`` → {key: value}."""
    pairs = (item.split("=", 1) for item in text.split(",") if "=" in item)
    return {k.strip(): v.strip() for k, v in pairs if k.strip() and v.strip()}


class KubeApi:
    """The official ``kubernetes`` client, answering plain dicts. The one place that talks
    to the API server: errors become Transient (retry) or Permanent (say why)."""

    def __init__(self, config: dict | None = None):
        self.config = config or kubernetes_settings()
        try:
            from kubernetes import client
            from kubernetes import config as kube_config
        except ImportError as exc:  # the ``kubernetes`` extra is not installed
            raise PermanentBackendError(
                "The kubernetes Python client is not installed on the portal host "
                "(pip install 'cardpool[kubernetes]')."
            ) from exc
        try:
            if self.config["KUBECONFIG"] or not os.environ.get("KUBERNETES_SERVICE_HOST"):
                self.client = kube_config.new_client_from_config(
                    config_file=self.config["KUBECONFIG"] or None,
                    context=self.config["CONTEXT"] or None,
                )
            else:  # in the cluster, as the portal's own ServiceAccount
                configuration = client.Configuration()
                kube_config.load_incluster_config(client_configuration=configuration)
                self.client = client.ApiClient(configuration)
        except kube_config.ConfigException as exc:
            raise PermanentBackendError(f"No usable Kubernetes configuration: {exc}") from exc
        self.core = client.CoreV1Api(self.client)
        self.rbac = client.RbacAuthorizationV1Api(self.client)
        self.scheduling = client.SchedulingV1Api(self.client)

    @property
    def host(self) -> str:
        return self.client.configuration.host

    def call(self, fn: Callable, *args, **kwargs) -> dict:
        """Call *fn* (a client method) and answer its JSON body as a dict."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs.setdefault("_request_timeout", self.config["REQUEST_TIMEOUT"])
        try:
            response = fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            raise ApiError.from_exception(exc) from exc
        except (HTTPError, OSError) as exc:
            raise TransientBackendError(f"The Kubernetes API did not answer: {exc}") from exc
        data = response.data
        return json.loads(data) if data else {}

    def watch(self, fn: Callable, *args, timeout: int, **kwargs) -> Iterable[dict]:
        """The objects of a watch on *fn* (a list method) until *timeout* seconds pass."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        stream = watch.Watch().stream(
            fn, *args, timeout_seconds=timeout, _request_timeout=timeout + 5, **kwargs
        )
        try:
            for event in stream:
                yield event["type"], event["raw_object"]
        except ApiException as exc:
            raise ApiError.from_exception(exc) from exc
        except (HTTPError, OSError) as exc:
            # The stream broke off (a watch timeout on the wire): the caller reads again.
            logger.info("kubernetes watch ended: %s", exc)

    def exec(
        self, namespace: str, pod: str, command: list[str], *, stdin: str = ""
    ) -> tuple[int, str]:
        """Run *command* in the pod's container (``pods/exec``), *stdin* written to it; its
        exit status and output."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        try:
            resp = stream(
                self.core.connect_get_namespaced_pod_exec,
                pod,
                namespace,
                command=command,
                container="lease",
                stderr=True,
                stdin=bool(stdin),
                stdout=True,
                tty=False,
                _preload_content=False,
            )
            if stdin:
                resp.write_stdin(stdin)
            resp.run_forever(timeout=self.config["REQUEST_TIMEOUT"])
            rc = resp.returncode  # before read_all, which empties every channel
            output = resp.read_all()
            resp.close()
        except ApiException as exc:
            raise ApiError.from_exception(exc) from exc
        except Exception as exc:  # websocket errors have no common base worth naming
            raise TransientBackendError(f"exec in pod {pod} failed: {exc}") from exc
        return (rc if rc is not None else -1), output

    # --- create / replace / delete, with the answers that are no error here --------------

    def create(self, fn: Callable, *args, body: dict) -> dict | None:
        """Create; None when it exists already (409): the caller reads it."""
        try:
            return self.call(fn, *args, body=body)
        except ApiError as exc:
            if exc.status == 409:
                return None
            raise

    def delete(self, fn: Callable, *args, **kwargs) -> bool:
        """Delete; False when it is gone already (404)."""
        try:
            self.call(fn, *args, **kwargs)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def read(self, fn: Callable, *args) -> dict | None:
        try:
            return self.call(fn, *args)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise


class ApiError(TransientBackendError):
    """The API server refused: 4xx other than the ones a caller expects are permanent
    in meaning but raised as this class so callers can look at ``status``."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"Kubernetes API {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @classmethod
    def from_exception(cls, exc) -> ApiError | PermanentBackendError:
        try:
            body = json.loads(exc.body or "{}")
        except ValueError:
            body = {}
        message = body.get("message") or str(exc.reason or "")
        error = cls(exc.status or 0, body.get("reason") or str(exc.reason or ""), message)
        return error

    @property
    def quota_exceeded(self) -> bool:
        return self.status == 403 and "exceeded quota" in self.message


def permanent(exc: ApiError, what: str) -> PermanentBackendError:
    return PermanentBackendError(f"Kubernetes refused {what}: {exc.message or exc.reason}")


def phase(pod: dict) -> str:
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return "Terminating"
    return pod.get("status", {}).get("phase") or "Pending"


def why_pending(pod: dict) -> str:
    """The scheduler's or the kubelet's reason a pod is not running (first one found)."""
    status = pod.get("status", {})
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return cond.get("message") or cond.get("reason") or "not scheduled"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting:
            return f"{waiting.get('reason', '')}: {waiting.get('message', '')}".strip(": ")
    return status.get("reason") or status.get("message") or "pending"


__all__ = [
    "ApiError",
    "KubeApi",
    "kubernetes_settings",
    "parse_pairs",
    "permanent",
    "phase",
    "why_pending",
]
