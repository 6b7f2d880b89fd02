"""Working on leased cards: environments, browser sessions, SSH keys, workspace usage.

The rules live in ``leasing.workbench``; these are the records.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _


class Environment(models.Model):
    """A software stack an operator offers on the nodes (CUDA 12.4 + PyTorch, CANN 8.0 +
    torch_npu, …), the cards it runs on, and how a session enters it on a node."""

    class Entry(models.TextChoices):
        NONE = "none", _("Node's default (nothing to enter)")
        MODULE = "module", _("Environment module (module load NAME)")
        VENV = "venv", _("Python venv (path)")
        CONDA = "conda", _("Conda environment (path)")
        APPTAINER = "apptainer", _("Apptainer/Singularity image (path)")

    slug = models.SlugField(_("slug"), max_length=60, unique=True)
    name = models.CharField(_("name"), max_length=100)
    # Kept to a family and a version string on purpose: a stack catalogue may replace both.
    stack_family = models.CharField(
        _("software stack"), max_length=30, help_text=_("e.g. cuda, cann, neuware, dtk, musa")
    )
    stack_version = models.CharField(
        _("stack version"), max_length=60, blank=True, help_text=_("e.g. 12.4 + PyTorch 2.5")
    )
    card_models = models.ManyToManyField(
        "inventory.CardModel",
        verbose_name=_("card models"),
        blank=True,
        related_name="environments",
        help_text=_("Card models it runs on (any of these or of the vendors below)."),
    )
    vendors = models.JSONField(
        _("vendors"), default=list, blank=True, help_text=_('Vendors it runs on, e.g. ["nvidia"].')
    )
    entry_kind = models.CharField(
        _("entered by"), max_length=12, choices=Entry.choices, default=Entry.NONE
    )
    entry = models.CharField(
        _("module name or path"), max_length=300, blank=True, help_text=_("Empty for none.")
    )
    description = models.CharField(_("description"), max_length=200, blank=True)
    active = models.BooleanField(_("offered"), default=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("environment")
        verbose_name_plural = _("environments")

    def __str__(self) -> str:
        return self.name

    @property
    def stack(self) -> str:
        return f"{self.stack_family} {self.stack_version}".strip()


class SessionStatus(models.TextChoices):
    STARTING = "starting", _("Starting")
    RUNNING = "running", _("Running")
    ENDED = "ended", _("Ended")
    FAILED = "failed", _("Failed")


LIVE_SESSION_STATES = (SessionStatus.STARTING, SessionStatus.RUNNING)


class SessionQuerySet(models.QuerySet):
    def live(self):
        return self.filter(status__in=LIVE_SESSION_STATES)

    def end_for_lease(self, lease_id: int, *, at, reason: str = "lease_ended") -> int:
        """End every live session of a lease (its route answers "ended" from now on). Called
        where a holding ends — ``scheduler.run.release_begin`` and ``lease_fail`` — so a
        session never outlives its lease; the backend's release stops the process."""
        return (
            self.filter(lease_id=lease_id)
            .live()
            .update(status=SessionStatus.ENDED, ended_at=at, end_reason=reason)
        )


class Session(models.Model):
    """JupyterLab (with its terminals) on a leased node, run as the holder inside the lease's
    environment and reached through the portal's session proxy at ``/sessions/<id>/``."""

    lease = models.ForeignKey("leasing.Lease", on_delete=models.CASCADE, related_name="sessions")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="card_sessions"
    )
    environment = models.ForeignKey(
        Environment, on_delete=models.SET_NULL, null=True, blank=True, related_name="sessions"
    )
    host = models.CharField(_("node"), max_length=253)
    address = models.CharField(_("address"), max_length=64, blank=True)
    port = models.PositiveIntegerField(_("port"))
    # Jupyter's own token: the proxy sends it, the browser never sees it.
    token = models.CharField(max_length=64, editable=False)
    status = models.CharField(
        _("status"), max_length=10, choices=SessionStatus.choices, default=SessionStatus.STARTING
    )
    backend = models.CharField(max_length=20, blank=True)
    # Where the backend keeps it: the Slurm job (and step name), or "agent".
    placement = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(_("asked"))
    started_at = models.DateTimeField(_("running since"), null=True, blank=True)
    ended_at = models.DateTimeField(_("ended"), null=True, blank=True)
    end_reason = models.CharField(max_length=20, blank=True)
    # Why it failed, as a kind the reader's language renders (sessions.failure_message);
    # failure_reason keeps the node's own words (a log tail) for the operator.
    failure_kind = models.CharField(max_length=20, blank=True)
    failure_reason = models.TextField(blank=True)

    objects = SessionQuerySet.as_manager()

    class Meta:
        verbose_name = _("session")
        verbose_name_plural = _("sessions")
        constraints = [
            models.UniqueConstraint(
                fields=["lease"],
                condition=Q(status__in=["starting", "running"]),
                name="session_one_live_per_lease",
            )
        ]

    def __str__(self) -> str:
        return f"session {self.pk} of lease {self.lease_id}"

    @property
    def base_url(self) -> str:
        return f"/sessions/{self.pk}/"


class SshKey(models.Model):
    """A public key of a user; allowed on the nodes of their active leases."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ssh_keys"
    )
    name = models.CharField(_("name"), max_length=80)
    public_key = models.TextField(_("public key"))
    fingerprint = models.CharField(_("fingerprint"), max_length=80)
    created_at = models.DateTimeField(_("added"))

    class Meta:
        ordering = ["created_at", "pk"]
        verbose_name = _("SSH key")
        verbose_name_plural = _("SSH keys")
        constraints = [
            models.UniqueConstraint(fields=["user", "fingerprint"], name="sshkey_unique_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"


class WorkspaceUsage(models.Model):
    """The last measured size of one workspace directory (a user's or a team's)."""

    path = models.CharField(max_length=500, unique=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
    )
    team = models.ForeignKey(
        "portal.Team", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    bytes_used = models.BigIntegerField(default=0)
    files = models.BigIntegerField(default=0)
    measured_at = models.DateTimeField()
    warned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("workspace usage")
        verbose_name_plural = _("workspace usage")

    def __str__(self) -> str:
        return self.path
