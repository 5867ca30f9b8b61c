"""Leasing: isolated, verified-pristine instances handed out from a pool (docs/architecture.md, "Leases").

- :mod:`envctl.leases.client` — the one client (HTTP), its errors and the ``Lease`` value; below Lab,
  so ``Lab.lease`` uses it without importing the pool;
- :mod:`envctl.leases.pool` — the pool: lease states, verification, release, watchdog, healing;
  a *store* says where members live (:class:`~envctl.leases.pool.LocalStore`: instances on this
  engine; :class:`envctl.cloud.pool.LabStore`: instances on a cloud lab's hosts);
- :mod:`envctl.leases.http` — the pool's HTTP face (the lease routes of ``envctl serve``).

Nothing is imported here, so importing the client never loads the pool.
"""
