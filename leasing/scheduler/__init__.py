"""Placement and queue: a pure planner (planner.py) over a snapshot of the database (snapshot.py)."""
