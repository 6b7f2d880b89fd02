"""Pool health: alert rules over the cards' readings, the alerts' lifecycle, and the card
health that keeps hot or silent cards out of placement (docs/telemetry.md, "Pool health")."""
