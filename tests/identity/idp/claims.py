"""The provider's claims: the standard ones from the Django user, and a "groups" scope whose
claim lists the user's Django groups (what the portal maps to teams)."""

from oidc_provider.lib.claims import ScopeClaims


def userinfo(claims, user):
    claims["preferred_username"] = user.username
    claims["given_name"] = user.first_name
    claims["family_name"] = user.last_name
    claims["email"] = user.email
    claims["email_verified"] = True
    return claims


class GroupsClaims(ScopeClaims):
    info_groups = ("Groups", "The groups you belong to.")

    def scope_groups(self):
        return {"groups": sorted(self.user.groups.values_list("name", flat=True))}
