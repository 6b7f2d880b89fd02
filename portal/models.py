"""People: departments, teams, memberships and site-wide roles."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from inventory.models import StackFamily


class Department(models.Model):
    """An optional grouping of teams (for reports)."""

    name = models.CharField(_("name"), max_length=100)
    slug = models.SlugField(_("slug"), max_length=60, unique=True)

    class Meta:
        ordering = ["slug"]
        verbose_name = _("department")
        verbose_name_plural = _("departments")

    def __str__(self) -> str:
        return self.name


class Team(models.Model):
    """A group whose members lease cards and share a quota; leases are charged to a team."""

    name = models.CharField(_("name"), max_length=100)
    slug = models.SlugField(_("slug"), max_length=60, unique=True)
    department = models.ForeignKey(
        Department,
        verbose_name=_("department"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="teams",
    )
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="teams"
    )
    idle_reclaim = models.BooleanField(
        _("reclaim idle leases"),
        default=False,
        help_text=_("End a lease whose cards stay idle after the warning (reason: idle)."),
    )
    idle_threshold_pct = models.PositiveSmallIntegerField(
        _("idle below (percent utilisation)"), default=5
    )
    idle_minutes = models.PositiveIntegerField(_("idle for (minutes)"), default=60)
    allow_borrowing = models.BooleanField(
        _("may borrow idle cards"),
        default=False,
        help_text=_("Members may lease idle cards beyond the concurrent quota as preemptible."),
    )

    class Meta:
        ordering = ["slug"]
        verbose_name = _("team")
        verbose_name_plural = _("teams")

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's place in a team: a plain member, or the lead who manages quotas and approvals."""

    class Role(models.TextChoices):
        MEMBER = "member", _("Member")
        LEAD = "lead", _("Lead")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")

    class Source(models.TextChoices):
        # Added by a lead or an operator: the directory sync never touches it.
        MANUAL = "manual", _("Added by hand")
        # Follows a directory group (CARDPOOL_DIRECTORY_TEAMS): added, changed and removed
        # by sign-in and the periodic sync (leasing.directory).
        DIRECTORY = "directory", _("From the directory")

    role = models.CharField(_("role"), max_length=10, choices=Role.choices, default=Role.MEMBER)
    source = models.CharField(
        _("source"), max_length=10, choices=Source.choices, default=Source.MANUAL
    )
    joined_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team")
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.team} ({self.role})"


def default_warning_offsets() -> list[int]:
    """24 h, 1 h and 10 min before the end of a lease."""
    return [1440, 60, 10]


class Profile(models.Model):
    """Per-user settings and site-wide roles (finance, operator)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile"
    )
    is_finance = models.BooleanField(
        _("finance"), default=False, help_text=_("May read all usage and cost reports.")
    )
    is_operator = models.BooleanField(
        _("operator"),
        default=False,
        help_text=_("Keeps the inventory; sees and manages everything."),
    )
    timezone = models.CharField(_("time zone"), max_length=64, blank=True)
    language = models.CharField(
        _("language"),
        max_length=16,
        blank=True,
        help_text=_(
            "Notices sent by email and webhooks are worded in it; empty: the language of your "
            "last signed-in session, else the site's."
        ),
    )
    session_language = models.CharField(
        _("language of the last session"),
        max_length=16,
        blank=True,
        editable=False,
        help_text=_("Kept by the portal as you read it; used when no language is chosen."),
    )
    warning_offsets = models.JSONField(
        _("warn before a lease ends (minutes)"),
        default=default_warning_offsets,
        blank=True,
        help_text=_("Minutes before the end of each lease to warn, e.g. [1440, 60, 10]."),
    )
    stack = models.CharField(
        _("software stack"),
        max_length=16,
        blank=True,
        choices=StackFamily.choices,
        help_text=_("The stack your code is built for; requests and the advisor assume it."),
    )
    slurm_user = models.CharField(
        _("Slurm user"),
        max_length=64,
        blank=True,
        help_text=_("The Unix/Slurm account leases run as; empty means the same as the username."),
    )

    class Meta:
        verbose_name = _("profile")
        verbose_name_plural = _("profiles")

    def __str__(self) -> str:
        return f"profile of {self.user}"


class DirectoryAccount(models.Model):
    """What the site's directory (LDAP or an OpenID Connect provider) says about a person:
    the Unix account (uid, uidNumber, gidNumber, home, shell) that sessions and SSH keys run
    as, the groups last seen, and whether the directory has let the person go (``left_at``).

    Written at each directory sign-in and by the periodic sync (leasing.directory); read by
    whatever maps a portal user to a Unix account. Local accounts have none.
    """

    class Source(models.TextChoices):
        LDAP = "ldap", "LDAP"
        OIDC = "oidc", "OpenID Connect"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="directory_account"
    )
    source = models.CharField(max_length=10, choices=Source.choices)
    # The entry's DN (LDAP) or the provider's subject (OIDC).
    dn = models.CharField(max_length=500, blank=True)
    uid = models.CharField(_("Unix user"), max_length=64, blank=True)
    uid_number = models.PositiveIntegerField(null=True, blank=True)
    gid_number = models.PositiveIntegerField(null=True, blank=True)
    home = models.CharField(_("home directory"), max_length=255, blank=True)
    shell = models.CharField(max_length=255, blank=True)
    groups = models.JSONField(default=list, blank=True)
    seen_at = models.DateTimeField(_("last seen in the directory"))
    # Set when the directory removed or disabled the person (the account was deactivated
    # for it); cleared when the directory lets them back.
    left_at = models.DateTimeField(null=True, blank=True)
    left_reason = models.CharField(max_length=20, blank=True)

    class Meta:
        verbose_name = _("directory account")
        verbose_name_plural = _("directory accounts")

    def __str__(self) -> str:
        return f"{self.user} ({self.source}: {self.uid or self.dn})"


class AuditEntry(models.Model):
    """Who changed a rule or the pool, and when (leases have their own timeline: LeaseEvent)."""

    at = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    action = models.CharField(max_length=60)
    target = models.CharField(max_length=200)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-pk"]
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit trail")

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.action} {self.target}"
