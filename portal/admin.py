"""Admin for people: departments, teams with their members, and each user's site roles."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm

from portal.models import AuditEntry, Department, DirectoryAccount, Membership, Profile, Team
from portal.usernames import username_check

User = get_user_model()


@admin.register(Department)
class DepartmentAdmin(admin.ModelAdmin):
    list_display = ["name", "slug"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}


class MembershipInline(admin.TabularInline):
    model = Membership
    # "From the directory" rows follow a directory group: the next sync puts back what is
    # changed here (docs/operations.md, "Teams from the directory").
    fields = ["user", "role", "source", "joined_at"]
    readonly_fields = ["source", "joined_at"]
    autocomplete_fields = ["user"]
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "department"]
    list_filter = ["department"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    list_select_related = ["department"]
    inlines = [MembershipInline]


class ProfileInline(admin.StackedInline):
    model = Profile
    fields = ["is_operator", "is_finance", "timezone"]
    can_delete = False
    max_num = 1


class DirectoryAccountInline(admin.StackedInline):
    """What the directory says about the person (read-only: the directory's to change)."""

    model = DirectoryAccount
    fields = [
        "source",
        "dn",
        "uid",
        "uid_number",
        "gid_number",
        "home",
        "shell",
        "groups",
        "seen_at",
        "left_at",
        "left_reason",
    ]
    readonly_fields = fields
    can_delete = False
    max_num = 0

    def has_add_permission(self, request, obj=None):
        return False


admin.site.unregister(User)


class UserAddForm(AdminUserCreationForm):
    def clean_username(self):
        return username_check(self.cleaned_data["username"])


class UserEditForm(UserChangeForm):
    def clean_username(self):
        return username_check(self.cleaned_data["username"], exclude_pk=self.instance.pk)


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    # Names in NFKC form, unique in any case (portal/usernames.py).
    form = UserEditForm
    add_form = UserAddForm
    inlines = [*BaseUserAdmin.inlines, ProfileInline, DirectoryAccountInline]
    list_display = [*BaseUserAdmin.list_display, "is_operator", "is_finance"]
    list_select_related = ["profile"]

    @admin.display(boolean=True, description=Profile._meta.get_field("is_operator").verbose_name)
    def is_operator(self, user) -> bool:
        return bool(getattr(user, "profile", None) and user.profile.is_operator)

    @admin.display(boolean=True, description=Profile._meta.get_field("is_finance").verbose_name)
    def is_finance(self, user) -> bool:
        return bool(getattr(user, "profile", None) and user.profile.is_finance)


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """Read-only: who changed quotas, limits and the pool, and when."""

    list_display = ["at", "actor", "action", "target"]
    list_filter = ["action"]
    search_fields = ["target", "actor__username"]
    date_hierarchy = "at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
