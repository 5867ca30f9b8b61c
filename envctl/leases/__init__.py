"""Leasing: isolated, verified-pristine instances handed out from a pool (docs/architecture.md, "Leases").

- :func:`lease` — the Python entry: ``with envctl.leases.lease(sites=["reddit"]) as lease: ...``;
- :mod:`envctl.leases.client` — the one client (HTTP), its errors and the ``Lease`` value;
- :mod:`envctl.leases.pool` — the pool's state machine: lease states, verification, release, watchdog,
  healing; it works through its members' ``Lab`` objects and never imports an engine module;
- :mod:`envctl.leases.members` — where members are (instances on the backend, their lease records in their
  routing tables) and how they come up; :mod:`envctl.leases.sizing` — how many fit (``--instances auto``);
- :mod:`envctl.leases.metrics` — what the pool counts (``lease list``, ``/metrics``);
- :mod:`envctl.leases.http` — the pool's HTTP face (the lease routes of ``envctl serve``).

Importing this package loads nothing else, so :func:`lease` (HTTP only) never loads the pool.
"""
from __future__ import annotations

from typing import Any


def lease(sites: list[str] | None = None, *, pool: str | None = None, ttl: float = 600.0, server: str | None = None,
          wait: float = 0.0, holder: str = "", max_seconds: float | None = None, access: str = "write") -> Any:
    """Lease an isolated, verified-pristine instance for a ``with`` block; released when it ends::

        from envctl.leases import lease
        with lease(sites=["reddit"]) as l:
            l.env["WA_REDDIT"], l.auth["reddit_state.json"], l.instance
            l.check()  # raises LeaseLost at once if the lease ended under us

    From the lease server at ``server`` (or ``$ENVCTL_LEASE_SERVER``; its URL with the token path, if any),
    else the running ``envctl serve --instances N`` of pool ``pool`` (``$ENVCTL_POOL``, default "default"). A
    thread heartbeats every ttl/3; ``LeaseLost`` is raised when the lease expired, was reclaimed
    (``max_seconds``, ``serve --max-lease``), released by someone else, or its instance was lost (its node
    down); a release the server refuses is an error. ``access="read"``: a lease shared with other read leases on one
    verified instance (up to ``serve --readers``); ``l.tainted`` says why when a change overlapped it (another reader
    wrote). See :mod:`envctl.leases.client`."""
    from envctl.leases.client import LeaseClient, find_server, held

    client = LeaseClient(find_server(server, pool))
    return held(client, sites, ttl=ttl, wait=wait, holder=holder, max_seconds=max_seconds, access=access)


__all__ = ["lease"]
