"""What a lease pool's worker watches on its members besides leases: their sites' probes (a site failing for
``heal_after`` seconds is recreated, URLs unchanged), instances lost under a lease (removed, their node down or
drained: the lease ends with why, the instance comes up again), nodes going down, drained or paused, and copies the
kernel killed for their memory limit (counted; a holder is told on its lease). A mixin of
:class:`envctl.leases.pool.Pool`.

Swarm's two ways of emptying a node, as Swarm users expect them: ``drain`` stops the node's tasks (Swarm shuts the
instance's containers down), so a lease held there ends at once (``lost: node drained``) and the instance comes up on
another node; ``pause`` (no new task, the running ones run on) is the gentle way: a free instance there leaves the
node at once, a held one runs on until its leases end, and then leaves it instead of being reset in place."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from envctl.errors import EnvctlError
from envctl.leases.client import iso_time
from envctl.leases.metrics import Stats
from envctl.leases.states import FREE, HELD, STARTING, PoolMember, MemberStore

NOTICES_KEPT = 20
NODE_AGREES = 45.0  # seconds a rebuild waits for the manager to see a node that stopped answering as down


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
    _move: Callable[[PoolMember, str], None]  # Holds

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> threading.Thread:
        raise NotImplementedError

    def _end(self, lease_id: str, why: str) -> None:
        raise NotImplementedError

    def _notice(self, m: PoolMember, site: str, what: str, lease_id: str | None = None) -> None:
        """Tell the holders of ``m`` (every lease holding ``site``, or only ``lease_id``) what happened to the site: a
        notice on the lease (in the heartbeat's answer and the lease listing)."""
        with self.cond:
            if m.state not in HELD:
                return
            for lid, lease in m.leases.items():
                if (lease_id is None or lid == lease_id) and site in (lease.get("sites") or []):
                    notes = lease.setdefault("notices", [])
                    notes.append({"site": site, "at": time.time(), "what": what})
                    del notes[:-NOTICES_KEPT]

    def _watch_oom(self, m: PoolMember) -> None:
        """Count the copies of ``m`` the kernel killed for their memory limit since the last look; the holder is
        told, and a free member's sites are verified again before its next lease."""
        now = time.time()
        kills = m.lab.oom_kills(m.oom_since, now)
        m.oom_since = now
        for site, member, when in kills:
            self.stats.oom_kills[site] = self.stats.oom_kills.get(site, 0) + 1
            m.seen = None
            m.known.pop(site, None)
            self.log(f"pool {self.name}: {m.name}/{site}: {member} was killed by its memory limit (out of memory)")
            self._notice(m, site, f"a copy of {site} was killed by its memory limit (out of memory) at {iso_time(when)}")

    def _watch_nodes(self, members: list[PoolMember]) -> None:
        """The nodes' states (a pool on a swarm): each ready -> down transition is a node loss; the instances of a
        node down or drained are lost (their leases end with why), a free one on a paused node leaves it."""
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
        for m in members:
            state = states.get(m.node, "") if m.node else ""
            if state == "drain" and m.state in (*HELD, FREE):
                self._lose(m, f"node drained ({m.node}: Swarm stops a drained node's tasks)")
            elif state == "down" and m.state in (*HELD, FREE):
                self._lose(m, f"node down ({m.node} is down)")
            elif state == "pause" and m.state == FREE:
                self._move(m, f"its node {m.node} is paused (Swarm: no new task there)")


    def _node_lost(self, node: str) -> None:
        """Count ``node`` lost once until it is ready again: seen down by the manager, or found not answering by a
        probe first (the manager marks a node down only after its heartbeats are missed)."""
        if node and node not in self.nodes_lost:
            self.nodes_lost.add(node)
            self.stats.node_losses += 1
            self.log(f"pool {self.name}: node {node} is down")

    def _probe(self, m: PoolMember) -> None:
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

    def _lose(self, m: PoolMember, why: str) -> None:
        """The member can no longer serve (removed, its node down or drained): its lease ends at once with why (409
        to its holder, ``LeaseLost``), and it is brought up again (on another node, on a swarm)."""
        with self.cond:
            if m.state not in (*HELD, FREE):
                return
            if why.startswith("node down"):
                self._node_lost(m.node)
            for lid in list(m.leases) if m.state in HELD else []:
                self.stats.lost += 1
                self._end(lid, f"lost: {why}")
            m.state, m.leases, m.error, m.failing = STARTING, {}, why, {}
            m.known, m.seen, m.window, m.closed, m.taint = {}, None, set(), "", ""
            self.cond.notify_all()
        self.log(f"pool {self.name}: {m.name} lost ({why}); bringing it up again")
        self._spawn(self._rebuild, m, m.node if "does not answer" in why else "")

    def _rebuild(self, m: PoolMember, node: str = "") -> None:
        """Remove what is left of ``m`` and bring it up again (placed anew on a swarm). ``node``: a node that stopped
        answering before the manager saw it down: the rebuild waits (up to :data:`NODE_AGREES` seconds) until the
        manager does, so the new instance is not placed on it."""
        deadline = time.monotonic() + NODE_AGREES
        while node and time.monotonic() < deadline:
            try:
                if m.lab.nodes().get(node, "down") != "ready":
                    break
            except EnvctlError:
                pass
            time.sleep(1.0)
        try:
            m.lab.down()  # what is left of it (services of a dead node, a proxy without copies)
        except Exception as exc:  # noqa: BLE001 - brought up again all the same
            self.log(f"pool {self.name}: removing what was left of {m.name} failed: {exc}")
        self.store.bring_up(self, [m])

    def _heal(self, m: PoolMember, site: str, why: str = "") -> None:
        try:
            [r] = m.lab.reset([site], tier="recreate", refill=m.lab.keeps_spares())
            self.stats.reset(r.tier, r.ok, r.seconds)
            m.known.pop(site, None)  # a new copy: its signal is read (and its fingerprint taken) at the next check
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

