"""The kubernetes backend against the API stand-in (tests/leasing/kube_fake.py), over HTTP
with the official client: request → pod → active with access, idempotence, a pod that never
schedules, extend, resize (pod replaced, holder told first), preemption with its checkpoint,
release, and the errors the API answers. Every manifest sent is schema-checked by the fake."""

from datetime import timedelta

import pytest

from leasing.backends import PermanentBackendError, TransientBackendError, get_backend
from leasing.backends.kubernetes import KubernetesBackend, parse_pairs, resource_for
from leasing.backends.kubernetes_manifests import default_resource
from leasing.choices import EndReason, Kind, LeaseStatus, Priority
from leasing.lifecycle import changes, endings, provisioning, resize
from leasing.lifecycle import tasks as lease_tasks
from leasing.lifecycle.kubernetes import kubernetes_mirror
from leasing.lifecycle.validation import Checkpoint
from leasing.models import BackendCall, Lease, Notification
from leasing.teams.services import quota_set
from tests.leasing.conftest import T0, ask, hours


def provision(lease):
    assert provisioning.provision_step(lease_id=lease.pk)
    lease.refresh_from_db()
    return lease


def token_of(lease) -> str:
    import yaml

    return yaml.safe_load(lease.access["kubeconfig"])["users"][0]["user"]["token"]


def test_a_request_becomes_a_pod_on_the_planned_node_with_the_vendor_resource(
    frozen, kube, alice, vision, a100, kube_node
):
    lease = provision(ask(alice, vision, a100, count=2))
    assert lease.status == LeaseStatus.ACTIVE
    (pod,) = kube.pods_of(lease.pk)
    assert pod["metadata"]["namespace"] == "cardpool-vision"
    assert pod["metadata"]["labels"]["cardpool.io/lease"] == str(lease.pk)
    assert pod["metadata"]["labels"]["cardpool.io/user"] == "alice"
    assert pod["spec"]["nodeName"] == "gpu01"  # bound by the scheduler
    sent = next(b for m, p, b in kube.requests if m == "POST" and p.endswith("/pods"))
    assert "nodeName" not in sent["spec"]  # never bypasses the scheduler
    term = sent["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term == {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu01"]}
    (container,) = sent["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert container["image"] == "docker.io/library/busybox:1.36"  # cards only: the holder
    assert sent["spec"]["priorityClassName"] == "cardpool-normal"
    assert kube.get("priorityclasses", "", "cardpool-normal")["preemptionPolicy"] == "Never"
    assert sent["spec"]["securityContext"]["runAsUser"] == 1005  # alice, mapped
    assert sent["spec"]["restartPolicy"] == "Never"
    name = pod["metadata"]["name"]
    assert lease.access["backend"] == "kubernetes" and lease.access["pods"] == [name]
    (node,) = lease.access["nodes"]
    assert (node["host"], node["cards"], node["resource"]) == ("gpu01", 2, "nvidia.com/gpu")
    assert BackendCall.objects.get(lease=lease, action="provision").backend == "kubernetes"


def test_the_exec_token_allows_only_exec_into_the_lease_pod(
    frozen, kube, alice, vision, a100, kube_node
):
    lease = provision(ask(alice, vision, a100, count=2))
    other = provision(ask(alice, vision, a100, count=1))
    token = token_of(lease)
    (pod,) = kube.pods_of(lease.pk)
    (other_pod,) = kube.pods_of(other.pk)
    ns, name = "cardpool-vision", pod["metadata"]["name"]
    assert kube.can(token, "create", "pods/exec", ns, name)
    assert not kube.can(token, "create", "pods/exec", ns, other_pod["metadata"]["name"])
    assert not kube.can(token, "delete", "pods", ns, name)
    assert not kube.can(token, "create", "pods", ns, name)
    assert not kube.can(token, "create", "pods/exec", "cardpool-nlp", name)
    grant = kube.tokens[token]
    assert grant["pod"]["name"] == name  # bound to the pod: it dies with it


def test_provision_is_idempotent_on_the_lease_id(frozen, kube, alice, vision, a100, kube_node):
    lease = provision(ask(alice, vision, a100, count=2))
    again = KubernetesBackend().provision(provisioning.holding_of(lease))
    assert len(kube.pods_of(lease.pk)) == 1 and again["pods"] == lease.access["pods"]
    conflicts = [p for m, p, _ in kube.requests if m == "POST" and p.endswith("/namespaces")]
    assert len(conflicts) == 2  # the second create answered 409 and was taken as done


def test_a_lost_answer_to_the_create_is_picked_up_by_the_retry(
    frozen, kube, alice, vision, a100, kube_node
):
    lease = ask(alice, vision, a100)
    kube.fail_next("POST", "/pods", 500, "etcdserver: request timed out")
    with pytest.raises(TransientBackendError):
        provisioning.provision_step(lease_id=lease.pk)
    lease = provision(lease)
    assert lease.status == LeaseStatus.ACTIVE and len(kube.pods_of(lease.pk)) == 1
    assert [c.ok for c in BackendCall.objects.filter(lease=lease).order_by("pk")] == [False, True]


def test_a_pod_that_never_schedules_waits_then_fails_with_the_reason(
    frozen, kube, alice, vision, a100, kube_node
):
    lease = ask(alice, vision, a100)
    kube.never_schedule.add(f"lease-{lease.pk}")
    with pytest.raises(TransientBackendError, match="untolerated taint"):
        provisioning.provision_step(lease_id=lease.pk)  # the watch timed out; retried later
    assert len(kube.pods_of(lease.pk)) == 1
    frozen.shift(timedelta(seconds=121))
    lease_tasks.provision_lease.run(lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.FAILED
    assert "did not place" in lease.failure_reason and "taint" in lease.failure_reason
    assert kube.pods_of(lease.pk) == []  # it holds nothing in the cluster


def test_a_pod_scheduled_during_the_watch_is_seen(frozen, kube, alice, vision, a100, kube_node):
    lease = ask(alice, vision, a100)
    kube.never_schedule.add(f"lease-{lease.pk}")

    def placed_while_watching():
        kube.never_schedule.clear()
        kube.schedule()

    kube.on_watch = placed_while_watching
    lease = provision(lease)
    assert lease.status == LeaseStatus.ACTIVE
    assert kube.on_watch is None  # the hand-over did watch, and saw the pod run


def test_a_pod_that_failed_at_once_fails_the_hand_over(
    frozen, kube, alice, vision, a100, kube_node
):
    lease = ask(alice, vision, a100)
    kube.never_schedule.add(f"lease-{lease.pk}")
    with pytest.raises(TransientBackendError):
        provisioning.provision_step(lease_id=lease.pk)
    (pod,) = kube.pods_of(lease.pk)
    kube.set_phase("cardpool-vision", pod["metadata"]["name"], "Failed", "ErrImagePull")
    lease_tasks.provision_lease.run(lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.FAILED and "ErrImagePull" in lease.failure_reason


def test_extend_changes_nothing_in_the_cluster(frozen, kube, alice, vision, a100, kube_node):
    lease = provision(ask(alice, vision, a100))
    (before,) = kube.pods_of(lease.pk)
    changes.lease_extend(lease=lease, user=alice, minutes=60)
    assert lease_tasks.extend_lease_backend.run(lease.pk) == 0  # the portal's end is the truth
    (after,) = kube.pods_of(lease.pk)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert kube.can(
        token_of(lease), "create", "pods/exec", "cardpool-vision", after["metadata"]["name"]
    )


def test_resize_replaces_the_pod_after_telling_the_holder(
    frozen, kube, alice, ops, vision, a100, kube_node
):
    quota_set(user=ops, team=vision, card_model=a100, max_concurrent_cards=3)
    assert kubernetes_mirror()["quotas"] == ["vision"]
    lease = provision(ask(alice, vision, a100, count=2))
    (old,) = kube.pods_of(lease.pk)
    resize.lease_resize(lease=lease, user=alice, count=3)
    assert provisioning.change_step(lease_id=lease.pk)
    lease.refresh_from_db()
    (new,) = kube.pods_of(lease.pk)
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert new["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "3"}
    assert lease.access["pods"] == [new["metadata"]["name"]]
    # The new pod was made while the old one still ran: the quota (2 × 3) left room for both.
    creates = [p for m, p, b in kube.requests if m == "POST" and p.endswith("/pods")]
    deletes = [p for m, p, _ in kube.requests if m == "DELETE" and "/pods/" in p]
    assert len(creates) == 2 and deletes == [
        f"/api/v1/namespaces/cardpool-vision/pods/{old['metadata']['name']}"
    ]
    notice = Notification.objects.get(lease=lease, kind=Kind.LEASE_RESTARTING)
    call = BackendCall.objects.get(lease=lease, action="change")
    assert notice.created_at <= call.started_at and notice.pk  # told before the change ran
    assert (notice.data["message"], notice.data["params"]) == (
        "restarting",
        {"id": lease.pk, "n": 3},
    )
    # The exec token follows the new pod.
    assert kube.can(
        token_of(lease), "create", "pods/exec", "cardpool-vision", new["metadata"]["name"]
    )
    assert not kube.can(
        token_of(lease), "create", "pods/exec", "cardpool-vision", old["metadata"]["name"]
    )
    # Again: nothing more to change.
    KubernetesBackend().change(provisioning.holding_of(lease))
    assert len([p for m, p, b in kube.requests if m == "POST" and p.endswith("/pods")]) == 2


def test_resize_without_room_beside_the_old_pod_replaces_it(
    frozen, kube, alice, vision, a100, kube_node
):
    lease = provision(ask(alice, vision, a100, count=2))
    (old,) = kube.pods_of(lease.pk)
    # A quota with no room for a second pod (set outside the portal's mirror).
    kube.handle(
        "POST",
        "/api/v1/namespaces/cardpool-vision/resourcequotas",
        {},
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "tight"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "3"}},
        },
    )
    resize.lease_resize(lease=lease, user=alice, count=3)
    assert provisioning.change_step(lease_id=lease.pk)
    (new,) = kube.pods_of(lease.pk)
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert new["status"]["phase"] == "Running"


def test_preemption_delivers_the_checkpoint_in_the_pod_then_releases_it(
    frozen, kube, lena, bob, vision, nlp, a100, kube_node, django_capture_on_commit_callbacks
):
    job = provision(
        ask(
            bob,
            nlp,
            a100,
            count=4,
            duration=hours(6),
            priority=Priority.PREEMPTIBLE,
            checkpoint=Checkpoint(signal="usr1", seconds=60, requeue=False),
        )
    )
    (pod,) = kube.pods_of(job.pk)
    assert pod["spec"]["priorityClassName"] == "cardpool-preemptible"
    frozen.move_to(T0 + hours(1))
    with django_capture_on_commit_callbacks(execute=False):
        ask(lena, vision, a100, count=4, duration=hours(1), priority=Priority.HIGH)
    job.refresh_from_db()
    assert job.preempt_at is not None
    assert provisioning.checkpoint_step(lease_id=job.pk)
    assert kube.execs == [
        ("cardpool-nlp", pod["metadata"]["name"], ["/bin/sh", "-c", "kill -s USR1 -1"])
    ]
    done = job.events.get(kind="checkpoint_signal").data
    assert done["via"] == "kubernetes" and done["signal_rc"] == [0]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 30  # the grace after SIGTERM
    frozen.move_to(job.preempt_at)
    assert endings.preemptions_due() == 1
    job.refresh_from_db()
    assert job.end_reason == EndReason.PREEMPTED
    assert provisioning.release_step(lease_id=job.pk)
    assert kube.pods_of(job.pk) == []


def test_release_deletes_the_pod_waits_for_it_and_revokes_the_token(
    frozen, kube, alice, vision, a100, kube_node
):
    lease = provision(ask(alice, vision, a100, count=2))
    token = token_of(lease)
    (pod,) = kube.pods_of(lease.pk)
    kube.instant_delete = False  # the pod takes its grace to go
    changes.lease_release(lease=lease, user=alice)
    with pytest.raises(TransientBackendError, match="still terminating"):
        provisioning.release_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.RELEASING  # not ended before the cards are free
    assert not kube.can(token, "create", "pods/exec", "cardpool-vision", pod["metadata"]["name"])
    kube.finish_deletions()
    assert provisioning.release_step(lease_id=lease.pk)
    lease.refresh_from_db()
    assert lease.status == LeaseStatus.ENDED and kube.pods_of(lease.pk) == []
    assert kube.get("serviceaccounts", "cardpool-vision", f"lease-{lease.pk}-exec") is None
    assert KubernetesBackend().status(provisioning.holding_of(lease)) == "released"
    KubernetesBackend().release(provisioning.holding_of(lease))  # again: no error


def test_sessions_run_in_the_pod_their_script_on_stdin(
    frozen, kube, alice, vision, a100, kube_node
):
    from leasing.backends import SessionSpec

    lease = provision(ask(alice, vision, a100))
    (pod,) = kube.pods_of(lease.pk)
    backend = KubernetesBackend()
    holding = provisioning.holding_of(lease)
    spec = SessionSpec(
        session_id=7, host="gpu01", port=8888, script="export JUPYTER_TOKEN=secret-token\n"
    )
    placement = backend.session_start(holding, spec)
    assert placement["address"] == pod["status"]["podIP"]
    assert placement["pod"] == pod["metadata"]["name"]
    ns, name, command = kube.execs[-1]
    assert command[:2] == ["/bin/sh", "-c"] and "secret-token" not in command[2]
    ip = pod["status"]["podIP"]
    assert kube.stdins == [
        f"export CARDPOOL_SESSION_IP={ip}\nexport JUPYTER_TOKEN=secret-token\n".encode()
    ]
    assert "kill -0" in command[2]  # a retried start finds it running
    backend.session_stop(holding, placement)
    assert "kill $(cat /tmp/cardpool-session-7.pid)" in kube.execs[-1][2][2]


def test_api_errors_are_transient_or_permanent(frozen, kube, alice, vision, a100, kube_node):
    lease = ask(alice, vision, a100)
    holding = provisioning.holding_of(lease)
    kube.fail_next("POST", "/pods", 403, 'pods "x" is forbidden: violates PodSecurity')
    with pytest.raises(PermanentBackendError, match="PodSecurity"):
        KubernetesBackend().provision(holding)
    kube.close()  # the API server is gone
    with pytest.raises(TransientBackendError):
        KubernetesBackend().status(holding)


def test_a_card_model_without_a_resource_is_a_permanent_error(
    frozen, kube, alice, vision, a100, kube_node
):
    a100.vendor = "other"
    a100.save()
    lease = ask(alice, vision, a100)
    with pytest.raises(PermanentBackendError, match="No Kubernetes resource"):
        KubernetesBackend().provision(provisioning.holding_of(lease))


def test_backend_follows_the_node_label(frozen, kube, alice, vision, a100, kube_node, settings):
    settings.CARDPOOL = {**settings.CARDPOOL, "BACKEND": "local"}
    lease = ask(alice, vision, a100)
    assert isinstance(get_backend(holding=provisioning.holding_of(lease)), KubernetesBackend)


def test_resource_defaults_settings_and_node_labels():
    from leasing.backends import NodeCards

    assert default_resource("nvidia", "h100") == "nvidia.com/gpu"
    assert default_resource("huawei", "ascend-910b") == "huawei.com/Ascend910"
    assert default_resource("huawei", "ascend-310p") == "huawei.com/Ascend310P"
    assert default_resource("cambricon", "mlu370") == "cambricon.com/mlu"
    assert default_resource("hygon", "dcu-k100") == "hygon.com/dcu"
    assert default_resource("kunlunxin", "r200") == "kunlunxin.com/xpu"
    assert default_resource("metax", "c500") == "metax-tech.com/gpu"
    assert default_resource("moorethreads", "s4000") == "mthreads.com/gpu"
    assert default_resource("iluvatar", "bi-v100") == "iluvatar.ai/gpu"
    config = {"RESOURCES": {"h100": "nvidia.com/mig-1g.10gb"}}
    assert resource_for("h100", "nvidia", None, config) == "nvidia.com/mig-1g.10gb"
    node = NodeCards("n1", (0,), {"kubernetes:resource:h100": "nvidia.com/gpu.shared"})
    assert resource_for("h100", "nvidia", node, config) == "nvidia.com/gpu.shared"
    assert parse_pairs("a=b, c = d ,bad") == {"a": "b", "c": "d"}


def test_lease_records_count_only(frozen, kube, alice, vision, a100, kube_node):
    """The device plugin picks the devices: the access says how many, not which."""
    lease = provision(ask(alice, vision, a100, count=2))
    (node,) = lease.access["nodes"]
    assert node["devices"] == [] and node["cards"] == 2
    assert Lease.objects.get(pk=lease.pk).allocations.count() == 2


def test_the_pod_runs_the_environment_image_at_the_lease_priority(
    frozen, kube, lena, vision, a100, kube_node, settings
):
    from leasing.models import Environment

    torch = Environment.objects.create(
        slug="cuda-torch", name="CUDA + PyTorch", stack_family="cuda", vendors=["nvidia"]
    )
    settings.CARDPOOL_KUBERNETES = {
        **settings.CARDPOOL_KUBERNETES,
        "IMAGES": {"cuda-torch": "registry.example.org/cuda:12.4-torch"},
    }
    lease = provision(ask(lena, vision, a100, environment=torch, priority=Priority.HIGH))
    (pod,) = kube.pods_of(lease.pk)
    assert pod["spec"]["containers"][0]["image"] == "registry.example.org/cuda:12.4-torch"
    assert pod["spec"]["priorityClassName"] == "cardpool-high"
    assert kube.get("priorityclasses", "", "cardpool-high")["value"] == 200


def test_a_swapped_card_on_the_same_node_changes_no_pod_and_tells_nothing(
    frozen, kube, alice, vision, a100, kube_node
):
    """The device plugin chose the devices: a card swapped in Cardpool's records (same node,
    same count) leaves the pod as it is, and the holder hears of no restart."""
    lease = provision(ask(alice, vision, a100, count=2))
    (before,) = kube.pods_of(lease.pk)
    provisioning.backend_change_after_commit(lease, now=lease.start_at)
    assert provisioning.change_step(lease_id=lease.pk)
    (after,) = kube.pods_of(lease.pk)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert not Notification.objects.filter(lease=lease, kind=Kind.LEASE_RESTARTING).exists()


def test_the_holders_kubeconfig_trusts_the_clusters_ca(
    frozen, kube, alice, vision, a100, kube_node, tmp_path, settings
):
    import base64

    import yaml

    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    settings.CARDPOOL_KUBERNETES = {
        **settings.CARDPOOL_KUBERNETES,
        "SERVER_URL": "https://k8s.example.org:6443",
    }
    lease = provision(ask(alice, vision, a100))
    backend = KubernetesBackend()
    # As loaded from an https cluster's certificate-authority (the stand-in speaks http).
    backend.api.client.configuration.ssl_ca_cert = str(ca)
    access = backend.access(provisioning.holding_of(lease))
    cluster = yaml.safe_load(access["kubeconfig"])["clusters"][0]["cluster"]
    assert cluster["server"] == "https://k8s.example.org:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]).decode() == ca.read_text()


def test_the_sessions_gate_opens_a_session_in_the_pod(frozen, kube, alice, vision, a100, kube_node):
    """The holder's session (JupyterLab and its terminals) runs in the lease's pod and is
    reached at the pod's IP by the same authenticating proxy as on any node."""
    from leasing.lifecycle import session_steps
    from leasing.models import Session
    from leasing.workbench import sessions

    lease = provision(ask(alice, vision, a100))
    (pod,) = kube.pods_of(lease.pk)
    session = sessions.session_open(lease=lease, user=alice)
    assert session_steps.session_start_step(session_id=session.pk) == "check"
    session = Session.objects.get(pk=session.pk)
    assert (session.backend, session.host, session.address) == (
        "kubernetes",
        "gpu01",
        pod["status"]["podIP"],
    )
    assert session.placement["pod"] == pod["metadata"]["name"]
    (script,) = kube.stdins
    assert f"export JUPYTER_TOKEN={session.token}".encode() in script
    assert f"--ServerApp.base_url=/sessions/{session.pk}/".encode() in script
    assert b"CUDA_VISIBLE_DEVICES" not in script  # the device plugin set what the pod sees


def test_only_the_holder_reads_the_exec_token(frozen, kube, alice, lena, vision, a100, kube_node):
    from django.test import Client

    lease = provision(ask(alice, vision, a100))
    holder, lead = Client(), Client()
    holder.force_login(alice)
    lead.force_login(lena)
    mine = holder.get(f"/api/v1/leases/{lease.pk}/").json()["access"]
    theirs = lead.get(f"/api/v1/leases/{lease.pk}/").json()["access"]
    assert token_of(lease) in mine["kubeconfig"]
    assert "kubeconfig" not in theirs and theirs["pods"] == mine["pods"]
    assert token_of(lease) in holder.get(f"/leases/{lease.pk}/").content.decode()
    page = lead.get(f"/leases/{lease.pk}/")
    assert page.status_code == 200 and token_of(lease) not in page.content.decode()
