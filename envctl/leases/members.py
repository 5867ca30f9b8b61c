"""A pool's members: instances ``<pool>-1`` … ``<pool>-N`` on the backend, each an :class:`envctl.lab.Lab`
(made by the caller's factory), their lease records in their own routing tables."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from envctl.catalog import Catalog
from envctl.errors import EnvctlError, UsageError
from envctl.leases.pool import FREE, Conflict, PoolMember, Pool
from envctl.locks import state_dir
from envctl.validate import PORT_OFFSET_MAX, validate_instance_name


def auth_dir(instance: str) -> Path:
    """Where a pool member's login state lives: ``<state dir>/leases/<instance>/auth`` (0700)."""
    d = state_dir() / "leases" / validate_instance_name(instance) / "auth"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


class Members:
    """The members of a pool (``size`` of them; ``size`` None: every instance whose record names the pool, what a
    client-side view uses), brought up with ``Lab.up`` on free port offsets from ``base_offset``."""

    def __init__(self, make_lab: Callable[[str], Any], *, size: int | None = None, flavor: str | None = None,
                 sites: list[str] | None = None, spares: int | None = None, base_offset: int = 10000,
                 offset_step: int = 1000, bind: str = "127.0.0.1",
                 instances: Callable[[], list[Any]] | None = None) -> None:
        self.make_lab = make_lab
        self.size, self.flavor, self.sites, self.want_spares = size, flavor, sites, spares
        self.base_offset, self.offset_step, self.bind = base_offset, offset_step, bind
        self.instances = instances  # -> InstanceInfo of every instance on the backend (Lab.instances)
        self._claimed: dict[str, int] = {}  # member -> the port offset a bring-up in progress took for it
        self._lock = threading.Lock()

    def names(self, pool: str) -> list[str]:
        if self.size:
            return [f"{pool}-{i}" for i in range(1, self.size + 1)]
        names = []
        for info in (self.instances() if self.instances else []):
            if info.state != "running":
                continue
            try:
                if self.make_lab(info.instance).lease_record().get("pool") == pool:
                    names.append(info.instance)
            except EnvctlError:
                continue  # another instance's proxy going away as we look
        return names

    def make(self, name: str) -> Any:
        return self.make_lab(name)

    def target(self, m: PoolMember) -> list[str]:
        return m.lab.catalog.resolve(self.sites, all_sites=not self.sites)

    def claim(self, m: PoolMember, pool: str) -> tuple[dict[str, Any], list[str]]:
        def update(rec: dict[str, Any]) -> dict[str, Any] | None:
            if rec.get("pool") not in (None, pool):
                raise UsageError(f"instance '{m.name}' belongs to pool '{rec['pool']}'",
                                 "serve that pool, or use another --instance name for this one")
            return None if rec else {"pool": pool, "state": FREE}

        return m.lab.write_lease(update), m.lab.sites_up()

    def store(self, m: PoolMember, record: dict[str, Any], expect: Callable[[dict[str, Any]], bool] | None) -> None:
        def update(rec: dict[str, Any]) -> dict[str, Any]:
            if expect is not None and not expect(rec):
                raise Conflict(f"the lease record of {m.name} changed under us: {rec.get('state')}")
            return record

        m.lab.write_lease(update)

    def update(self, m: PoolMember, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        return m.lab.write_lease(change)

    def bring_up(self, pool: Pool, members: list[PoolMember]) -> None:
        catalog = members[0].lab.catalog
        sites = catalog.resolve(self.sites, all_sites=not self.sites)
        fresh = [m for m in members if m.lab.settings() is None]
        with self._lock:  # bring-ups side by side (two members lost at once) take different offsets
            offsets = dict(zip((m.name for m in fresh), self._free_offsets(fresh, sites, catalog)))
            self._claimed.update(offsets)

        def up(m: PoolMember) -> None:
            t = time.monotonic()
            offset = offsets.get(m.name)
            pool.log(f"pool {pool.name}: bringing {m.name} up (flavor {self.flavor or 'full'}, "
                     + (f"port offset {offset}, " if offset is not None else "repairing, ") + f"sites {', '.join(sites)})")
            try:
                res = m.lab.up(sites, flavor=self.flavor, port_offset=offset, login=True, spares=self.want_spares)
                if not getattr(res, "ok", False):
                    bad = [s for s in getattr(res, "sites", []) if not s.ok]
                    raise EnvctlError(f"{m.name}: " + ("; ".join(f"{s.site}: {s.error}" for s in bad)
                                                        or getattr(res, "login_error", "") or "up failed"))
                m.auth_at = time.time()
                pool._adopt(m)
                pool.log(f"pool {pool.name}: {m.name} ready in {time.monotonic() - t:.1f}s")
            except Exception as exc:  # noqa: BLE001 - reported through the pool's listing; retried
                pool.came_up_failed(m, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            finally:
                with self._lock:
                    self._claimed.pop(m.name, None)  # its proxy (if it came up) now holds the ports

        workers = [threading.Thread(target=up, args=(m,), daemon=True) for m in members]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    def _free_offsets(self, members: list[PoolMember], sites: list[str], catalog: Catalog) -> list[int]:
        """A port offset per member whose public ports (for ``sites``) are free and clash with no instance."""
        if not members:
            return []
        ports = sorted({p for s in sites for p in catalog.site(s).public_ports().values()})
        taken: set[int] = {p + off for off in self._claimed.values() for p in ports}
        for info in (self.instances() if self.instances else []):
            taken.update(info.ports)
        out: list[int] = []
        offset = self.base_offset
        probe = members[0].lab
        while len(out) < len(members):
            mine = {p + offset for p in ports}
            if max(mine) > 65535 or offset > PORT_OFFSET_MAX:  # no retry can help: the pool says so and stops trying
                raise UsageError(f"no free port offsets from {self.base_offset} for {len(members)} instance(s) of "
                                 f"{', '.join(sites)} (ports up to {max(ports)} + offset must stay below 65536, "
                                 f"offsets at most {PORT_OFFSET_MAX})",
                                 "free some ports, give a lower --base-offset, or serve fewer --instances")
            if not mine & taken and probe.ports_free(sorted(mine), self.bind):
                out.append(offset)
                taken |= mine
            offset += self.offset_step
        return out


__all__ = ["Members", "auth_dir"]
