"""Telling people: notices in the portal, email and webhooks (services, wording, sending), the
notification centre and its settings, and the delivery tasks."""
