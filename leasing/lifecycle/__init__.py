"""A lease's life: asking (validation, requests), changes (release, cancel, extend, resize),
the states the backend drives (provisioning), endings and maintenance, reconciliation with
Slurm; and the lease pages, API and tasks. The top layer of ``leasing`` (docs/architecture.md)."""
