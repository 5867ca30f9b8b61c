"""Health probes declared in the catalog, and waits with deadlines (no fixed sleeps anywhere)."""
from envctl.healthchecks.probes import ProbeResult, run_probe, run_probes
from envctl.healthchecks.wait import Deadline, wait_for

__all__ = ["ProbeResult", "run_probe", "run_probes", "Deadline", "wait_for"]
