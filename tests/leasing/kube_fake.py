"""A stateful stand-in for the Kubernetes API server, over real HTTP, for the endpoints the
kubernetes backend uses (no API server can run on these machines; docs/operations.md).

It keeps objects per (resource, namespace, name) and answers like the API server does for
what Cardpool relies on: 409 on a second create, 404 on a missing object, 422 for an
immutable field, 403 for a pod the namespace's ResourceQuota has no room for or whose
PriorityClass does not exist, watches that stream events as chunks and end at
``timeoutSeconds``, graceful pod deletion, a scheduler that binds a pending pod to the node its
required node affinity names when the node is schedulable and has the extended resource free
(or leaves it ``Unschedulable`` with the scheduler's message), ``pods/exec`` over the
``v4.channel.k8s.io`` WebSocket protocol, and TokenRequests bound to a pod, checked against
Roles and RoleBindings by ``can``. Every object the backend sends is validated against the
Kubernetes OpenAPI schema of each supported version (``kubernetes-validate``); invalid ones are
refused with 422 and kept in ``invalid`` for the test to assert on.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import secrets
import socket
import struct
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from django.utils import timezone

from leasing.backends.kubernetes_manifests import SUPPORTED_VERSIONS

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
NAMESPACED = {
    "pods",
    "resourcequotas",
    "serviceaccounts",
    "roles",
    "rolebindings",
}
KINDS = {
    "namespaces": "Namespace",
    "pods": "Pod",
    "resourcequotas": "ResourceQuota",
    "serviceaccounts": "ServiceAccount",
    "roles": "Role",
    "rolebindings": "RoleBinding",
    "priorityclasses": "PriorityClass",
    "nodes": "Node",
}
_validated: dict[str, str] = {}


def validation_error(body: dict) -> str:
    """'' when *body* is valid in every supported version, else the first error."""
    import kubernetes_validate

    key = json.dumps(body, sort_keys=True)
    if key not in _validated:
        error = ""
        for version in SUPPORTED_VERSIONS:
            try:
                kubernetes_validate.validate(body, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                error = f"{version}: {exc.message} at {list(exc.path)}"
                break
        _validated[key] = error
    return _validated[key]


def status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class ApiFailure(Exception):
    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _matches(labels: dict, selector: str) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


def _quantity(value) -> int:
    return int(str(value))


class FakeKubernetes:
    """The API server's state and rules; ``serve()`` puts it on a free local port."""

    def __init__(self):
        self.lock = threading.Condition()
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.events: list[tuple[int, str, str, str, dict]] = []  # rv, type, resource, ns, obj
        self.rv = 0
        self.requests: list[tuple[str, str, dict | None]] = []
        self.invalid: list[tuple[str, str]] = []
        self.execs: list[tuple[str, str, list[str]]] = []
        self.stdins: list[bytes] = []  # what each exec with stdin was sent
        self.exec_rc = 0
        self.tokens: dict[str, dict] = {}
        self.failures: list[tuple[str, str, int, str]] = []  # method, path part, code, message
        self.never_schedule: set[str] = set()  # pod name prefixes the scheduler ignores
        self.instant_delete = True
        self.on_watch = None  # called once when the next watch has begun
        self.server: ThreadingHTTPServer | None = None

    # --- test helpers ----------------------------------------------------------------------

    def serve(self) -> str:
        fake = self

        class Handler(_Handler):
            api = fake

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def kubeconfig(self, url: str) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": url}}],
            "users": [{"name": "portal", "user": {"token": "portal-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "portal"}}],
            "current-context": "fake",
        }

    def add_node(
        self,
        name: str,
        *,
        resources: dict[str, int],
        allocatable: dict[str, int] | None = None,
        labels: dict | None = None,
        unschedulable: bool = False,
        ready: str = "True",
    ) -> dict:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {
                "capacity": {
                    "cpu": "64",
                    "memory": "512Gi",
                    **{k: str(v) for k, v in resources.items()},
                },
                "allocatable": {
                    "cpu": "63",
                    "memory": "500Gi",
                    **{k: str(v) for k, v in (allocatable or resources).items()},
                },
                "conditions": [{"type": "Ready", "status": ready}],
            },
        }
        with self.lock:
            self._store("nodes", "", node, "ADDED")
        return node

    def fail_next(self, method: str, path_part: str, code: int, message: str = "") -> None:
        """The next *method* request whose path contains *path_part* is answered *code*."""
        self.failures.append((method, path_part, code, message or f"injected {code}"))

    def get(self, resource: str, namespace: str, name: str) -> dict | None:
        with self.lock:
            return copy.deepcopy(self.objects.get((resource, namespace, name)))

    def all(self, resource: str, namespace: str | None = None) -> list[dict]:
        with self.lock:
            return [
                copy.deepcopy(o)
                for (r, ns, _), o in sorted(self.objects.items())
                if r == resource and (namespace is None or ns == namespace)
            ]

    def pods_of(self, lease_id: int) -> list[dict]:
        return [
            p
            for p in self.all("pods")
            if p["metadata"]["labels"].get("cardpool.io/lease") == str(lease_id)
        ]

    def vanish(self, namespace: str, name: str) -> None:
        """The pod is deleted outside Cardpool (an operator, an eviction)."""
        with self.lock:
            obj = self.objects.pop(("pods", namespace, name))
            self._event("DELETED", "pods", namespace, obj)

    def set_phase(self, namespace: str, name: str, phase: str, reason: str = "") -> None:
        with self.lock:
            pod = self.objects[("pods", namespace, name)]
            pod["status"].update(phase=phase, reason=reason)
            self._touch("pods", namespace, pod)

    def finish_deletions(self) -> None:
        """Terminating pods are gone (their grace ran out)."""
        with self.lock:
            for key, obj in list(self.objects.items()):
                if obj["metadata"].get("deletionTimestamp"):
                    del self.objects[key]
                    self._event("DELETED", key[0], key[1], obj)

    def schedule(self) -> None:
        with self.lock:
            self._schedule()

    def can(self, token: str, verb: str, resource: str, namespace: str, name: str) -> bool:
        """Whether *token* may *verb* the *resource* named *name* (RBAC, as the API checks
        it): its ServiceAccount and bound pod still exist, and a RoleBinding of the
        ServiceAccount grants a Role rule naming the verb, the resource and the object."""
        with self.lock:
            grant = self.tokens.get(token)
            if grant is None:
                return False
            ns, sa = grant["namespace"], grant["service_account"]
            account = self.objects.get(("serviceaccounts", ns, sa))
            if account is None or account["metadata"]["uid"] != grant["sa_uid"]:
                return False
            bound = grant.get("pod")
            if bound:
                pod = self.objects.get(("pods", ns, bound["name"]))
                if pod is None or pod["metadata"]["uid"] != bound["uid"]:
                    return False
            if namespace != ns:
                return False
            for (r, bns, _), binding in self.objects.items():
                if r != "rolebindings" or bns != ns:
                    continue
                if not any(
                    s.get("kind") == "ServiceAccount" and s.get("name") == sa
                    for s in binding.get("subjects", [])
                ):
                    continue
                role = self.objects.get(("roles", ns, binding["roleRef"]["name"]))
                for rule in (role or {}).get("rules", []):
                    if (
                        resource in rule.get("resources", [])
                        and verb in rule.get("verbs", [])
                        and (not rule.get("resourceNames") or name in rule["resourceNames"])
                    ):
                        return True
            return False

    # --- the API's rules -------------------------------------------------------------------

    def _event(self, type_: str, resource: str, namespace: str, obj: dict) -> None:
        self.events.append((self.rv, type_, resource, namespace, copy.deepcopy(obj)))
        self.lock.notify_all()

    def _touch(self, resource: str, namespace: str, obj: dict, type_: str = "MODIFIED") -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._event(type_, resource, namespace, obj)

    def _store(self, resource: str, namespace: str, obj: dict, type_: str) -> dict:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ"))
        if namespace:
            meta["namespace"] = namespace
        self.objects[(resource, namespace, meta["name"])] = obj
        self._touch(resource, namespace, obj, type_)
        return obj

    def _used(self, pods, resource: str) -> int:
        total = 0
        for pod in pods:
            if pod.get("status", {}).get("phase") in ("Failed", "Succeeded"):
                continue
            for c in pod["spec"]["containers"]:
                total += _quantity(c.get("resources", {}).get("requests", {}).get(resource, 0))
        return total

    def _requests(self, pod: dict) -> dict[str, int]:
        wanted: dict[str, int] = {}
        for c in pod["spec"]["containers"]:
            for res, q in c.get("resources", {}).get("requests", {}).items():
                wanted[res] = wanted.get(res, 0) + _quantity(q)
        return wanted

    def _admit_pod(self, namespace: str, pod: dict) -> None:
        pc = pod["spec"].get("priorityClassName")
        if pc and ("priorityclasses", "", pc) not in self.objects:
            raise ApiFailure(
                403,
                "Forbidden",
                f'pods "{pod["metadata"]["name"]}" is forbidden: no PriorityClass with name '
                f"{pc} was found",
            )
        in_ns = [o for (r, ns, _), o in self.objects.items() if r == "pods" and ns == namespace]
        for (r, ns, qname), quota in self.objects.items():
            if r != "resourcequotas" or ns != namespace:
                continue
            for key, hard in quota["spec"].get("hard", {}).items():
                res = key.removeprefix("requests.")
                asked = self._requests(pod).get(res, 0)
                used = self._used(in_ns, res)
                if asked and used + asked > _quantity(hard):
                    raise ApiFailure(
                        403,
                        "Forbidden",
                        f'pods "{pod["metadata"]["name"]}" is forbidden: exceeded quota: {qname}, '
                        f"requested: {key}={asked}, used: {key}={used}, limited: {key}={hard}",
                    )

    def _schedule(self) -> None:
        nodes = {
            o["metadata"]["labels"].get("kubernetes.io/hostname"): o
            for (r, _, _), o in self.objects.items()
            if r == "nodes"
        }
        pods = [o for (r, _, _), o in self.objects.items() if r == "pods"]
        for pod in pods:
            if pod["status"].get("phase") != "Pending" or pod["metadata"].get("deletionTimestamp"):
                continue
            name = pod["metadata"]["name"]
            if any(name.startswith(prefix) for prefix in self.never_schedule):
                message = "0/1 nodes are available: 1 node(s) had untolerated taint."
            else:
                message = self._try_bind(pod, nodes, pods)
            if message:
                conditions = [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                    }
                ]
                if pod["status"].get("conditions") != conditions:
                    pod["status"]["conditions"] = conditions
                    self._touch("pods", pod["metadata"]["namespace"], pod)

    def _try_bind(self, pod: dict, nodes: dict, pods: list[dict]) -> str:
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        expr = terms[0]["matchExpressions"][0]
        node = next((n for h, n in nodes.items() if h in expr["values"]), None)
        total = len(nodes)
        if node is None:
            return f"0/{total} nodes are available: {total} node(s) didn't match Pod's node affinity/selector."
        if node["spec"].get("unschedulable"):
            return f"0/{total} nodes are available: 1 node(s) were unschedulable."
        node_name = node["metadata"]["name"]
        on_node = [p for p in pods if p["spec"].get("nodeName") == node_name]
        for res, asked in self._requests(pod).items():
            free = _quantity(node["status"]["allocatable"].get(res, 0)) - self._used(on_node, res)
            if asked > free:
                return f"0/{total} nodes are available: 1 Insufficient {res}."
        pod["spec"]["nodeName"] = node_name
        pod["status"] = {
            "phase": "Running",
            "podIP": f"10.244.0.{len(pods) + 1}",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
        }
        self._touch("pods", pod["metadata"]["namespace"], pod)
        return ""

    def handle(self, method: str, path: str, query: dict, body: dict | None) -> tuple[int, dict]:
        self.requests.append((method, path, body))
        for i, (fm, part, code, message) in enumerate(self.failures):
            if fm == method and part in path:
                del self.failures[i]
                raise ApiFailure(code, "Injected", message)
        resource, namespace, name, sub = _route(path)
        with self.lock:
            if method == "POST" and sub == "token":
                return 201, self._token(namespace, name, body or {})
            if body is not None and "kind" in body:
                error = validation_error(body)
                if error:
                    self.invalid.append((path, error))
                    raise ApiFailure(422, "Invalid", f"{KINDS.get(resource)} is invalid: {error}")
            if method == "POST":
                return 201, self._create(resource, namespace, body or {})
            if method == "PUT":
                return 200, self._replace(resource, namespace, name, body or {})
            if method == "DELETE":
                return 200, self._delete(resource, namespace, name)
            if name:
                obj = self.objects.get((resource, namespace, name))
                if obj is None:
                    raise ApiFailure(404, "NotFound", f'{resource} "{name}" not found')
                return 200, copy.deepcopy(obj)
            return 200, self._list(resource, namespace, query)

    def _create(self, resource: str, namespace: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        if resource in NAMESPACED and ("namespaces", "", namespace) not in self.objects:
            raise ApiFailure(404, "NotFound", f'namespaces "{namespace}" not found')
        if (resource, namespace, name) in self.objects:
            raise ApiFailure(409, "AlreadyExists", f'{resource} "{name}" already exists')
        obj = copy.deepcopy(body)
        if resource == "pods":
            self._admit_pod(namespace, obj)
            obj["status"] = {"phase": "Pending"}
        stored = self._store(resource, namespace, obj, "ADDED")
        if resource == "pods":
            self._schedule()
        return copy.deepcopy(stored)

    def _replace(self, resource: str, namespace: str, name: str, body: dict) -> dict:
        old = self.objects.get((resource, namespace, name))
        if old is None:
            raise ApiFailure(404, "NotFound", f'{resource} "{name}" not found')
        rv = body.get("metadata", {}).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiFailure(409, "Conflict", "the object has been modified")
        if resource == "priorityclasses" and (
            body.get("value") != old.get("value")
            or body.get("preemptionPolicy", "PreemptLowerPriority")
            != old.get("preemptionPolicy", "PreemptLowerPriority")
        ):
            raise ApiFailure(422, "Invalid", "PriorityClass: value: Forbidden: may not be changed")
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = old["metadata"]["uid"]
        obj["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"]
        stored = self._store(resource, namespace, obj, "MODIFIED")
        return copy.deepcopy(stored)

    def _delete(self, resource: str, namespace: str, name: str) -> dict:
        obj = self.objects.get((resource, namespace, name))
        if obj is None:
            raise ApiFailure(404, "NotFound", f'{resource} "{name}" not found')
        if resource == "pods" and not self.instant_delete:
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ")
                self._touch(resource, namespace, obj)
            return copy.deepcopy(obj)
        del self.objects[(resource, namespace, name)]
        self.rv += 1
        self._event("DELETED", resource, namespace, obj)
        if resource == "pods":
            self._schedule()  # its cards are free: a pending pod may fit now
        return copy.deepcopy(obj)

    def _list(self, resource: str, namespace: str, query: dict) -> dict:
        selector = query.get("labelSelector", [""])[0]
        fields = query.get("fieldSelector", [""])[0]
        items = [
            copy.deepcopy(o)
            for (r, ns, n), o in sorted(self.objects.items())
            if r == resource
            and (not namespace or ns == namespace)
            and _matches(o["metadata"].get("labels", {}), selector)
            and _fields(o, fields)
        ]
        return {
            "apiVersion": "v1",
            "kind": f"{KINDS.get(resource, 'Object')}List",
            "metadata": {"resourceVersion": str(self.rv)},
            "items": items,
        }

    def _token(self, namespace: str, name: str, body: dict) -> dict:
        error = validation_error(body)
        if error:
            self.invalid.append((f"token {name}", error))
            raise ApiFailure(422, "Invalid", error)
        account = self.objects.get(("serviceaccounts", namespace, name))
        if account is None:
            raise ApiFailure(404, "NotFound", f'serviceaccounts "{name}" not found')
        token = secrets.token_urlsafe(24)
        ref = body["spec"].get("boundObjectRef") or {}
        self.tokens[token] = {
            "namespace": namespace,
            "service_account": name,
            "sa_uid": account["metadata"]["uid"],
            "pod": {"name": ref["name"], "uid": ref.get("uid")} if ref.get("name") else None,
            "seconds": body["spec"].get("expirationSeconds"),
        }
        answer = copy.deepcopy(body)
        answer["status"] = {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"}
        return answer

    def watch_events(self, resource: str, namespace: str, query: dict, send, timeout: float):
        """Send the matching objects as ADDED, then each event, until *timeout* seconds."""
        import time

        selector = query.get("labelSelector", [""])[0]
        fields = query.get("fieldSelector", [""])[0]
        deadline = time.monotonic() + timeout

        def wanted(r, ns, obj):
            return (
                r == resource
                and (not namespace or ns == namespace)
                and _matches(obj["metadata"].get("labels", {}), selector)
                and _fields(obj, fields)
            )

        with self.lock:
            since = len(self.events)
            initial = [
                copy.deepcopy(o)
                for (r, ns, _), o in sorted(self.objects.items())
                if wanted(r, ns, o)
            ]
        for obj in initial:
            send({"type": "ADDED", "object": obj})
        hook, self.on_watch = self.on_watch, None
        if hook is not None:
            hook()
        while True:
            with self.lock:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                if len(self.events) == since:
                    self.lock.wait(timeout=min(left, 0.5))
                fresh = self.events[since:]
                since = len(self.events)
            for _rv, type_, r, ns, obj in fresh:
                if wanted(r, ns, obj):
                    send({"type": type_, "object": obj})

    def exec_in(self, namespace: str, name: str, command: list[str]) -> int:
        with self.lock:
            pod = self.objects.get(("pods", namespace, name))
            if pod is None:
                raise ApiFailure(404, "NotFound", f'pods "{name}" not found')
            if pod["status"].get("phase") != "Running":
                raise ApiFailure(400, "BadRequest", f"pod {name} is not running")
            self.execs.append((namespace, name, command))
            return self.exec_rc


def _fields(obj: dict, selector: str) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if key == "metadata.name" and obj["metadata"]["name"] != value:
            return False
        if key == "spec.nodeName" and obj.get("spec", {}).get("nodeName") != value:
            return False
    return True


def _route(path: str) -> tuple[str, str, str, str]:
    """(resource, namespace, name, subresource) of an API path."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest and rest[0] == "namespaces" and len(rest) >= 3:
        ns, resource = rest[1], rest[2]
        name = rest[3] if len(rest) > 3 else ""
        sub = rest[4] if len(rest) > 4 else ""
        return resource, ns, name, sub
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    return resource, "", name, sub


class _Handler(BaseHTTPRequestHandler):
    api: FakeKubernetes
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        return None

    def _body(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return None
        return json.loads(self.rfile.read(length) or b"null")

    def _answer(self, code: int, data: dict) -> None:
        raw = json.dumps(data).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _serve(self, method: str) -> None:
        split = urlsplit(self.path)
        query = parse_qs(split.query)
        try:
            if self.headers.get("Upgrade", "").lower() == "websocket":
                return self._exec(split.path, query)
            if query.get("watch", [""])[0] in ("true", "1", "True"):
                return self._watch(split.path, query)
            code, data = self.api.handle(method, split.path, query, self._body())
        except ApiFailure as exc:
            code, data = exc.code, status(exc.code, exc.reason, exc.message)
        self._answer(code, data)

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_PUT(self):
        self._serve("PUT")

    def do_DELETE(self):
        self._serve("DELETE")

    def _watch(self, path: str, query: dict) -> None:
        resource, namespace, _, _ = _route(path)
        self.api.requests.append(("WATCH", path, None))
        timeout = float(query.get("timeoutSeconds", ["30"])[0])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(event: dict) -> None:
            line = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()

        try:
            self.api.watch_events(resource, namespace, query, send, timeout)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _exec(self, path: str, query: dict) -> None:
        _, namespace, name, _ = _route(path)
        command = query.get("command", [])
        self.api.requests.append(("EXEC", path, {"command": command}))
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()  # noqa: S324
        try:
            rc = self.api.exec_in(namespace, name, command)
        except ApiFailure as exc:
            return self._answer(exc.code, status(exc.code, exc.reason, exc.message))
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        wanted = re.search(r"head -c (\d+)", " ".join(command))
        if wanted:  # the shell reads that many bytes of stdin (channel 0)
            self.api.stdins.append(_read_stdin(self.rfile, int(wanted.group(1))))
        if rc == 0:
            done = {"metadata": {}, "status": "Success"}
        else:
            done = {
                "metadata": {},
                "status": "Failure",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]},
            }
        try:
            self.wfile.write(_frame(b"\x01" + b"ok\n"))
            self.wfile.write(_frame(b"\x03" + json.dumps(done).encode()))
            self.wfile.write(_frame(struct.pack("!H", 1000), opcode=0x8))
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.close_connection = True


def _read_stdin(rfile, size: int) -> bytes:
    """Read the client's (masked) frames until *size* bytes came on channel 0."""
    data = b""
    while len(data) < size:
        head = rfile.read(2)
        if len(head) < 2:
            break
        length = head[1] & 0x7F
        if length == 126:
            length = struct.unpack("!H", rfile.read(2))[0]
        elif length == 127:
            length = struct.unpack("!Q", rfile.read(8))[0]
        mask = rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(rfile.read(length)))
        if payload[:1] == b"\x00":
            data += payload[1:]
    return data


def _frame(payload: bytes, opcode: int = 0x2) -> bytes:
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


__all__ = ["ApiFailure", "FakeKubernetes", "validation_error"]
