"""Personal API tokens: named, hashed at rest, shown once, revocable (a small app of its own).

It lives inside the portal package but has its own app label and migrations, so its schema
moves independently of the people models in portal/models.py.
"""
