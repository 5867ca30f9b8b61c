"""What a lease pool's worker watches on its members besides leases: their sites' probes (a site failing for
``heal_after`` seconds is recreated, URLs unchanged), instances lost under a lease (removed, their node down or
drained: the lease ends with why, the instance comes up again), nodes going down, and copies the kernel killed for
their memory limit (counted; a holder is told on its lease). A mixin of :class:`envctl.leases.pool.Pool`."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from envctl.errors import EnvctlError
from envctl.leases.client import _iso
from envctl.leases.metrics import Stats
from envctl.leases.states import FREE, LEASED, STARTING, Member, MemberStore

NOTICES_KEPT = 20


class Watch:
    """The pool's watching (see the module's docstring); the pool supplies the attributes below."""

    name: str
    store: MemberStore
    stats: Stats
    cond: threading.Condition
    heal_after: float
    node_states: dict[str, str]
    nodes_lost: set[str]
    log: Callable[[str], None]

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> threading.Thread:
        raise NotImplementedError

    def _end(self, lease_id: str, why: str) -> None:
        raise NotImplementedError

    def _notice(self, m: Member, site: str, what: str) -> None:
        """Tell the holder of ``m`` (if it holds ``site``) what happened to its site: a notice on its lease (in the
        heartbeat's answer and the lease listing)."""
        with self.cond:
            if m.state == LEASED and site in (m.lease.get("sites") or []):
                notes = m.lease.setdefault("notices", [])
                notes.append({"site": site, "at": time.time(), "what": what})
                del notes[:-NOTICES_KEPT]

    def _watch_oom(self, m: Member) -> None:
        """Count the copies of ``m`` the kernel killed for their memory limit since the last look; the holder is
        told, and a free member's sites are verified again before its next lease."""
        now = time.time()
        kills = m.lab.oom_kills(m.oom_since, now)
        m.oom_since = now
        for site, member, when in kills:
            self.stats.oom_kills[site] = self.stats.oom_kills.get(site, 0) + 1
            m.seen = None
            self.log(f"pool {self.name}: {m.name}/{site}: {member} was killed by its memory limit (out of memory)")
            self._notice(m, site, f"a copy of {site} was killed by its memory limit (out of memory) at {_iso(when)}")

    def _watch_nodes(self, members: list[Member]) -> None:
        """Count nodes going down (a pool on a swarm): each ready -> down transition is a node loss."""
        if not members or not any(m.node for m in members):
            return
        try:
            states = members[0].lab.nodes()
        except EnvctlError:
            return
        for node, state in states.items():
            if state == "down" and self.node_states.get(node) == "ready":
                self._node_lost(node)
            elif state == "ready":
                self.nodes_lost.discard(node)
        self.node_states = states

    def _node_lost(self, node: str) -> None:
        """Count ``node`` lost once until it is ready again: seen down by the manager, or found not answering by a
        probe first (the manager marks a node down only after its heartbeats are missed)."""
        if node and node not in self.nodes_lost:
            self.nodes_lost.add(node)
            self.stats.node_losses += 1
            self.log(f"pool {self.name}: node {node} is down")

    def _probe(self, m: Member) -> None:
        for site in list(m.sites):
            if site in m.healing:
                continue
            ok, why = m.lab.probe_site(site)
            if ok:
                m.failing.pop(site, None)
                continue
            lost = m.lab.lost()
            if lost:
                self._lose(m, lost)
                return
            since = m.failing.setdefault(site, time.monotonic())
            if time.monotonic() - since >= self.heal_after:
                self.log(f"pool {self.name}: {m.name}/{site} failed its probes for {time.monotonic() - since:.0f}s "
                         f"({why}); healing it (recreate)")
                m.healing.add(site)
                self._spawn(self._heal, m, site, why)

    def _lose(self, m: Member, why: str) -> None:
        """The member can no longer serve (removed, its node down or drained): its lease ends at once with why (409
        to its holder, ``LeaseLost``), and it is brought up again (on another node, on a swarm)."""
        with self.cond:
            if m.state not in (LEASED, FREE):
                return
            if why.startswith("node down"):
                self._node_lost(m.node)
            if m.state == LEASED:
                self.stats.lost += 1
                self._end(str(m.lease.get("id", "")), f"lost: {why}")
            m.state, m.lease, m.error, m.failing = STARTING, {}, why, {}
            self.cond.notify_all()
        self.log(f"pool {self.name}: {m.name} lost ({why}); bringing it up again")
        self._spawn(self._rebuild, m)

    def _rebuild(self, m: Member) -> None:
        try:
            m.lab.down()  # what is left of it (services of a dead node, a proxy without copies)
        except Exception as exc:  # noqa: BLE001 - brought up again all the same
            self.log(f"pool {self.name}: removing what was left of {m.name} failed: {exc}")
        self.store.bring_up(self, [m])

    def _heal(self, m: Member, site: str, why: str = "") -> None:
        try:
            [r] = m.lab.reset([site], tier="recreate", refill=m.lab.keeps_spares())
            self.stats.reset(r.tier, r.ok, r.seconds)
            if r.ok:
                self.stats.heals[site] = self.stats.heals.get(site, 0) + 1
                m.auth_at = time.time()
                self.log(f"pool {self.name}: healed {m.name}/{site} in {r.seconds:.1f}s (URLs unchanged)")
                self._notice(m, site, f"{site} failed its probes ({why or 'not healthy'}) and was replaced by a "
                                      "pristine copy, URLs unchanged: what this lease did there is gone")
            else:
                self.stats.heal_failures += 1
                self.log(f"pool {self.name}: healing {m.name}/{site} failed: {r.error}")
        except Exception as exc:  # noqa: BLE001
            self.stats.heal_failures += 1
            self.log(f"pool {self.name}: healing {m.name}/{site} failed: {exc}")
        finally:
            m.failing.pop(site, None)
            m.healing.discard(site)

