# Names vulture (--min-confidence 80) reports that are used: each is a parameter a framework
# passes and the override does not need. Read by .ci/run: `vulture portal inventory leasing
# .ci/vulture_whitelist.py --min-confidence 80`. Anything else it reports is dead: remove it.
# ruff: noqa
# fmt: off
auto_schema  # drf-spectacular's OpenApiAuthenticationExtension.get_security_definition (inventory/api_telemetry.py)
view  # DRF's BasePermission.has_permission / has_object_permission (api_telemetry, health/api, api_permissions)
deep  # PyYAML's SafeLoader.construct_mapping (inventory/importers_read.py: always deep)
force  # DRF's APIView.perform_content_negotiation (leasing/billing/api.py)
fp  # urllib's HTTPRedirectHandler.redirect_request (leasing/notify/webhooks.py: no redirects)
msg  # the same
newurl  # the same
many  # Django's connection.execute_wrapper callback (leasing/statements.py)
ldap_attributes  # django-python3-ldap's sync hook (portal/auth_ldap.py)
sociallogin  # allauth's SocialAccountAdapter.is_open_for_signup (portal/auth_sso.py)
ignore_patterns  # Django's BaseFinder.list (portal/staticfinders.py)
