"""What a lease pool counts, and how it is shown: the JSON summary of ``envctl lease list`` and Prometheus text
(version 0.0.4) on ``GET /metrics``. The pool records; this module renders."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from envctl.healthchecks.fingerprint import computed as fingerprints_computed

RESET_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 40, 80, 160)


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (nearest rank), rounded to ms; None for none."""
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(round(q * (len(s) - 1))))], 3)


@dataclass
class Stats:
    acquired: int = 0
    rejected: int = 0
    released: int = 0
    expired: int = 0
    reclaimed: int = 0  # held past max_seconds (the watchdog)
    lost: int = 0  # ended because the instance went away under them (its node down, removed)
    dirty: int = 0  # instances found not pristine when about to be leased (tampered while free)
    heals: dict[str, int] = field(default_factory=dict)  # site -> count
    heal_failures: int = 0
    oom_kills: dict[str, int] = field(default_factory=dict)  # site -> copies killed by their memory limit
    member_failures: int = 0  # a member failing to come up
    resets: dict[tuple[str, str], int] = field(default_factory=dict)  # (tier, ok) -> count
    reset_seconds: dict[str, list[float]] = field(default_factory=dict)  # tier -> [bucket counts..., sum, count]
    turnaround: list[float] = field(default_factory=list)  # seconds from a release to the instance free again
    verifications: int = 0  # site verifications (fingerprint passes) the pool ran
    verifications_skipped: int = 0  # sites not verified again: nothing but envctl reached them since they verified
    resets_skipped: int = 0  # leased sites not reset at release: nobody reached them during the lease
    node_losses: int = 0  # nodes seen going from ready to down (a pool on a swarm)
    signal_reads: int = 0  # readings of a member's change signals (one step per site, side by side)
    signals: int = 0  # site signals read (each is hashed as a fingerprint is: taken out of the fingerprints' count)
    given_up: int = 0  # candidates whose checks did not end within their request's time (answered without them)
    quarantined: int = 0  # free members that failed the background re-verification
    reverified: int = 0  # background re-verifications of free members
    reverify_deferred: int = 0  # background re-verifications put off: the host was busy (its load average)
    tainted: int = 0  # read leases that overlapped a change of their shared instance
    moved: int = 0  # members taken off a paused node and brought up on another

    def reset(self, tier: str, ok: bool, seconds: float) -> None:
        key = (tier, "true" if ok else "false")
        self.resets[key] = self.resets.get(key, 0) + 1
        h = self.reset_seconds.setdefault(tier, [0.0] * (len(RESET_BUCKETS) + 2))
        for i, le in enumerate(RESET_BUCKETS):
            if seconds <= le:
                h[i] += 1
        h[-2] += seconds
        h[-1] += 1

    def turned(self, seconds: float) -> None:
        self.turnaround.append(seconds)
        del self.turnaround[:-1000]

    def resets_summary(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for tier, h in self.reset_seconds.items():
            out[tier] = {"count": int(h[-1]), "mean_s": round(h[-2] / h[-1], 3) if h[-1] else None,
                         "failed": self.resets.get((tier, "false"), 0)}
        return out


def _escape(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def prometheus(summary: dict[str, Any], stats: Stats, nodes: dict[str, Any] | None = None) -> str:
    """``summary`` (the pool's JSON view) and ``stats`` as Prometheus text."""
    out: list[str] = []
    pool = summary["pool"]

    def metric(name: str, kind: str, help_text: str, samples: Iterable[tuple[dict[str, str], float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lbl = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            out.append(f"{name}{{{lbl}}} {_num(value)}" if lbl else f"{name} {_num(value)}")

    p = {"pool": pool}
    s = summary
    metric("envctl_pool_instances", "gauge", "Instances of the pool by state.",
           [({**p, "state": k}, v) for k, v in s["states"].items()])
    metric("envctl_leases_active", "gauge", "Instances leased now.", [(p, s["leases_active"])])
    metric("envctl_leases_free", "gauge", "Instances free to lease now.", [(p, s["leases_free"])])
    for key, help_text in (("acquired", "Leases handed out."), ("released", "Leases released by their holder."),
                           ("expired", "Leases reclaimed because their heartbeat stopped."),
                           ("reclaimed", "Leases reclaimed because they were held past their max_seconds."),
                           ("lost", "Leases ended because their instance went away (its node down, removed)."),
                           ("rejected", "Lease requests answered 503 (no free instance).")):
        metric(f"envctl_leases_{key}_total", "counter", help_text, [(p, s[key])])
    metric("envctl_instances_dirty_total", "counter",
           "Free instances found not pristine when about to be leased (reset instead).", [(p, s["dirty_found"])])
    metric("envctl_member_failures_total", "counter", "Times a member of the pool failed to come up.",
           [(p, stats.member_failures)])
    metric("envctl_members_failing", "gauge", "Members that failed to come up, with their error.",
           [({**p, "instance": i, "error": e[:200]}, 1) for i, e in sorted(s.get("failing", {}).items())])
    metric("envctl_verifications_total", "counter", "Site verifications (fingerprint passes) the pool ran.",
           [(p, stats.verifications)])
    metric("envctl_verifications_skipped_total", "counter", "Sites not fingerprinted again: their change signal (or, "
           "without a fingerprint, their probes) showed no change since they were last known pristine.",
           [(p, stats.verifications_skipped)])
    metric("envctl_signal_reads_total", "counter", "Readings of a member's change signals.", [(p, stats.signal_reads)])
    metric("envctl_checks_given_up_total", "counter", "Candidates whose checks did not end within their request's time "
           "(the request answered without them; no lease record written).", [(p, stats.given_up)])
    metric("envctl_quarantined_total", "counter", "Free members that failed the background re-verification "
           "(quarantined, then rebuilt).", [(p, stats.quarantined)])
    metric("envctl_reverifications_total", "counter", "Background re-verifications of free members.",
           [(p, stats.reverified)])
    metric("envctl_reverifications_deferred_total", "counter", "Background re-verifications put off because the host's "
           "load average was at or above the limit.", [(p, stats.reverify_deferred)])
    metric("envctl_tainted_leases_total", "counter", "Read leases that overlapped a change of their shared instance.",
           [(p, stats.tainted)])
    metric("envctl_leases_read", "gauge", "Read leases held now (on shared instances).", [(p, s.get("leases_read", 0))])
    metric("envctl_members_moved_total", "counter", "Instances taken off a paused node and brought up on another.",
           [(p, stats.moved)])
    metric("envctl_resets_skipped_total", "counter", "Leased sites not reset at release: no request reached them "
           "during the lease.", [(p, stats.resets_skipped)])
    metric("envctl_fingerprints_total", "counter", "Fingerprints this server process computed (the pool's "
           "verifications and the resets' own; change signals not counted).", [(p, summary["fingerprints"])])
    metric("envctl_resets_total", "counter", "Site resets by the tier that ended them and whether they verified.",
           [({**p, "tier": t, "ok": ok}, n) for (t, ok), n in sorted(stats.resets.items())])
    out.append("# HELP envctl_reset_seconds Site reset latency (verified), by tier.")
    out.append("# TYPE envctl_reset_seconds histogram")
    for tier, h in sorted(stats.reset_seconds.items()):
        for i, le in enumerate(RESET_BUCKETS):
            out.append(f'envctl_reset_seconds_bucket{{pool="{_escape(pool)}",tier="{tier}",le="{le:g}"}} {_num(h[i])}')
        out.append(f'envctl_reset_seconds_bucket{{pool="{_escape(pool)}",tier="{tier}",le="+Inf"}} {_num(h[-1])}')
        out.append(f'envctl_reset_seconds_sum{{pool="{_escape(pool)}",tier="{tier}"}} {_num(h[-2])}')
        out.append(f'envctl_reset_seconds_count{{pool="{_escape(pool)}",tier="{tier}"}} {_num(h[-1])}')
    metric("envctl_heals_total", "counter", "Sites replaced because they failed their probes.",
           [({**p, "site": k}, v) for k, v in sorted(stats.heals.items())])
    metric("envctl_heal_failures_total", "counter", "Heals that did not verify.", [(p, s["heal_failures"])])
    metric("envctl_oom_kills_total", "counter", "Site copies killed by their memory limit (then healed).",
           [({**p, "site": k}, v) for k, v in sorted(stats.oom_kills.items())])
    metric("envctl_spares_ready", "gauge", "Verified spare copies ready, per instance and site.",
           [({**p, "instance": key.split("/")[0], "site": key.split("/")[1]}, n)
            for key, n in sorted(s["spares_ready"].items())])
    if nodes is not None:
        metric("envctl_nodes", "gauge", "Nodes of the swarm the pool runs on, by state.",
               [({**p, "state": k}, v) for k, v in sorted(nodes.get("states", {}).items())])
        metric("envctl_node_instances", "gauge", "Instances of the pool per node.",
               [({**p, "node": k}, v) for k, v in sorted(nodes.get("instances", {}).items())])
        metric("envctl_node_losses_total", "counter", "Nodes lost (down) while the pool ran.",
               [(p, nodes.get("losses", 0))])
    return "\n".join(out) + "\n"


__all__ = ["Stats", "prometheus", "percentile", "RESET_BUCKETS"]
