"""An instance's routing table: its live state, in typed parts, kept in its front proxy.

- :class:`Routes`: which copy of each site is routed (``active``), and public port -> backend member
  (``by_port``), the ports the proxy publishes, and the members' addresses on the instance's network;
- :class:`ReadyCopies`: copies booted, verified and kept ready but not routed — a site's *spares*
  (copies of its golden image, source ``golden``) and *warm* copies of a named snapshot (source
  ``snapshot:NAME``) are one thing here — how many each source wants, and the capacity plan's say;
- ``pristine``: site -> the fingerprint (JSON) of its pristine state;
- :class:`LeaseRecord`: the instance's lease when it belongs to a pool.

The table is read once per operation and written by one writer, :class:`envctl.instance.Instance`
(its private ``_routing`` context, applied atomically through the proxy's control service). JSON written by an
envctl before issue 29 (``spares``, ``warm``, ``wanted``, ``verified`` at the top level) is read too.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

GOLDEN = "golden"  # the source of a site's spares
SNAPSHOT = "snapshot:"  # prefix of the source of a warm copy: "snapshot:<name>"


def snapshot_source(name: str) -> str:
    return f"{SNAPSHOT}{name}"


@dataclass
class Route:
    backend: str  # member name (container / swarm service)
    port: int  # its port
    # Copies of this site whose name matches this pattern may be addressed on this port with the request
    # header X-Envctl-Backend (used to verify and log in a ready copy before it is routed).
    allow: str = ""


@dataclass
class Routes:
    """What the proxy serves."""

    by_port: dict[str, Route] = field(default_factory=dict)  # str(public port) -> Route
    active: dict[str, str] = field(default_factory=dict)  # site -> slot of the routed copy
    ports: list[int] = field(default_factory=list)  # what the proxy publishes
    # Member name -> its address on the instance's network, recorded when a copy becomes ready, so that
    # routing it needs no engine call (a stale one is looked up again).
    addrs: dict[str, str] = field(default_factory=dict)

    def sites(self) -> list[str]:
        return list(self.active)


@dataclass
class Ready:
    """One ready copy: its slot, when it was last verified (probes and fingerprint; time.time()), and how
    many requests the proxy had passed to it by X-Envctl-Backend then (-1: unknown)."""

    slot: str
    verified: float = 0.0
    seen: int = -1


@dataclass
class ReadyCopies:
    """Copies kept ready, not routed: site -> source (``golden`` | ``snapshot:NAME``) -> ready copies."""

    slots: dict[str, dict[str, list[Ready]]] = field(default_factory=dict)
    # site -> source -> how many to keep ready (spares: 'up --spares K' or the capacity plan; a snapshot: 1)
    wanted: dict[str, dict[str, int]] = field(default_factory=dict)
    # Sites whose spares the capacity plan decides (not '--spares K'): site -> {"wanted": the catalog's
    # spares, "why": why it got fewer, "" when it got them}. A replenisher re-plans a site that got fewer.
    planned: dict[str, dict[str, Any]] = field(default_factory=dict)

    def of(self, site: str, source: str = GOLDEN) -> list[Ready]:
        return self.slots.get(site, {}).get(source, [])

    def want(self, site: str, source: str = GOLDEN) -> int:
        return self.wanted.get(site, {}).get(source, 0)

    def spares(self, site: str) -> list[str]:
        return [r.slot for r in self.of(site, GOLDEN)]

    def all_slots(self, site: str) -> list[str]:
        """Every ready copy of ``site``, whatever its source."""
        return [r.slot for rs in self.slots.get(site, {}).values() for r in rs]

    def snapshots(self, site: str) -> list[str]:
        """Names of the snapshots of ``site`` that want warm copies."""
        return sorted(s[len(SNAPSHOT):] for s in self.wanted.get(site, {}) if s.startswith(SNAPSHOT))

    def source_of(self, site: str, slot: str) -> str | None:
        return next((src for src, rs in self.slots.get(site, {}).items() if any(r.slot == slot for r in rs)), None)

    def sources(self, site: str) -> list[str]:
        return sorted(set(self.wanted.get(site, {})) | set(self.slots.get(site, {})))


@dataclass
class LeaseRecord:
    """The instance's lease in a pool (envctl.leases): pool, state, and while leased id, holder, sites,
    acquired, expires, ttl, max_seconds. Kept as the pool writes it."""

    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class RoutingTable:
    routes: Routes = field(default_factory=Routes)
    ready: ReadyCopies = field(default_factory=ReadyCopies)
    pristine: dict[str, str] = field(default_factory=dict)  # site -> fingerprint JSON of its pristine state
    lease: LeaseRecord = field(default_factory=LeaseRecord)
    # The instance's settings, as its labels say (written when its proxy is made): what lets this machine find the
    # instance through the proxy's control service alone, without an engine call (a stalled engine, a fast command).
    settings: dict[str, str] = field(default_factory=dict)

    def sites_up(self) -> list[str]:
        return self.routes.sites()

    # -- JSON ------------------------------------------------------------------------------------------
    def to_json(self) -> str:
        r, rc = self.routes, self.ready
        out: dict[str, Any] = {
            "routes": {k: asdict(v) for k, v in r.by_port.items()}, "active": r.active, "ports": r.ports,
            "pristine": self.pristine,
        }
        if r.addrs:
            out["addrs"] = r.addrs
        ready = {site: {src: [[x.slot, x.verified, x.seen] for x in rs] for src, rs in by.items()}
                 for site, by in rc.slots.items()}
        if ready:
            out["ready"] = ready
        if rc.wanted:
            out["wanted"] = rc.wanted
        if rc.planned:
            out["planned"] = rc.planned
        if self.lease.data:
            out["lease"] = self.lease.data
        if self.settings:
            out["settings"] = self.settings
        return json.dumps(out, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RoutingTable":
        raw = json.loads(text or "{}")
        routes = Routes({k: Route(**v) for k, v in (raw.get("routes") or {}).items()}, raw.get("active") or {},
                        raw.get("ports") or [], raw.get("addrs") or {})
        ready = ReadyCopies(planned=raw.get("planned") or {})
        for site, by in (raw.get("ready") or {}).items():
            ready.slots[site] = {src: [Ready(str(x[0]), float(x[1]), int(x[2])) for x in rs] for src, rs in by.items()}
        wanted = raw.get("wanted") or {}
        for site, w in wanted.items():
            ready.wanted[site] = dict(w) if isinstance(w, dict) else {GOLDEN: int(w)}  # before issue 29: spares only
        verified = raw.get("verified") or {}
        for site, slots in (raw.get("spares") or {}).items():  # before issue 29
            ready.slots.setdefault(site, {})[GOLDEN] = [
                Ready(s, *(float(verified[s][0]), int(verified[s][1])) if s in verified else ()) for s in slots]
        for site, by_name in (raw.get("warm") or {}).items():  # before issue 29
            for name, slots in by_name.items():
                ready.slots.setdefault(site, {})[snapshot_source(name)] = [Ready(s) for s in slots]
                ready.wanted.setdefault(site, {})[snapshot_source(name)] = 1
        return cls(routes, ready, raw.get("pristine") or {}, LeaseRecord(raw.get("lease") or {}),
                   {str(k): str(v) for k, v in (raw.get("settings") or {}).items()})


__all__ = ["RoutingTable", "Routes", "Route", "ReadyCopies", "Ready", "LeaseRecord", "GOLDEN", "SNAPSHOT",
           "snapshot_source"]
