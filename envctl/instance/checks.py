"""What envctl checks about a copy (docs/architecture.md, "Fingerprints"): its probes through the public URL (or
addressed by the proxy header), whether it died, its fingerprint, its change signal. Part of
:class:`envctl.instance.Instance` (``inst.checks``)."""
from __future__ import annotations

import os

from envctl.backends.base import Copy
from envctl.errors import DockerError, NotReady
from envctl.healthchecks.fingerprint import Fingerprint, hashed, mismatch
from envctl.healthchecks.probes import ProbeResult, run_probe
from envctl.healthchecks.wait import attempts
from envctl.instance.core import Core, Progress, noop
from envctl.instance.front import Front
from envctl.locks import one_of
from envctl.secrets import mask_text

VERIFY_SLOTS = max(2, 2 * (os.cpu_count() or 1))  # fingerprints run at once on this machine


class Checks:
    """Probes, fingerprints and change signals of an instance's copies."""

    def __init__(self, core: Core, front: Front) -> None:
        self.core, self.front = core, front

    def mask(self, site: str, text: str) -> str:
        """Hide the site's passwords and secret settings in text meant for humans or logs."""
        return mask_text(self.core.catalog.site(site), text)

    def _exec(self, copy: Copy, service: str, argv: list[str]) -> tuple[int, str]:
        m = copy.members.get(service)
        if m is None:
            raise DockerError(f"{copy.site}: copy {copy.slot} has no service '{service}'")
        return self.core.backend.copies.exec(m, argv)

    # -- probes ---------------------------------------------------------------------------------------------
    def probe(self, site: str) -> tuple[bool, list[ProbeResult]]:
        """The site's probes on its public URLs (whatever copy is routed), marked as envctl's own."""
        spec = self.core.catalog.site(site)
        d = self.core.settings.deployment
        own = self.front.own_headers()
        results = [run_probe(p, d.url(spec, p.service), headers=own) for p in spec.health.probes]
        return all(r.ok for r in results), results

    def probe_copy(self, copy: Copy) -> tuple[bool, list[ProbeResult]]:
        """The site's probes against one copy, through the proxy, on the public URL (routed or not)."""
        spec = self.core.catalog.site(copy.site)
        d = self.core.settings.deployment
        results = []
        for p in spec.health.probes:
            svc = p.service or spec.entry
            results.append(run_probe(p, d.url(spec, svc), headers={**self.front.own_headers(),
                                                                  **self.front.backend_header(copy, svc)}))
        return all(r.ok for r in results), results

    def wait_healthy(self, copy: Copy, progress: Progress = noop, *, public: bool = False) -> list[ProbeResult]:
        """Wait until ``copy`` passes its probes (through the proxy header; ``public``: on the public URL, as
        routed), failing fast when one of its members stops."""
        spec = self.core.catalog.site(copy.site)
        progress(copy.site, "wait", f"waiting for copy {copy.slot} to pass its probes")
        ok, results = False, list[ProbeResult]()
        for _ in attempts(spec.health.timeout, cancel=self.core.cancel):
            why = self.died(copy)
            if why:
                raise NotReady(f"{copy.site}: {why}", f"see 'envctl logs {copy.site}'")
            ok, results = self.probe(copy.site) if public else self.probe_copy(copy)
            if ok:
                break
        if not ok:
            bad = next(r for r in results if not r.ok)
            logs = (self.mask(copy.site, self.core.backend.copies.logs(copy.members[spec.entry], 15))
                    if spec.entry in copy.members else "")
            raise NotReady(f"{copy.site}: probe '{bad.name}' ({bad.url}) still failing after {spec.health.timeout:.0f}s: "
                           f"{bad.detail or bad.status}" + (f"\n--- last log lines ---\n{logs}" if logs else ""),
                           f"see 'envctl logs {copy.site}'")
        return results

    def died(self, copy: Copy) -> str:
        """Why ``copy`` cannot become healthy any more (a member gone or stopped, with its last log lines), or ''."""
        copies = self.core.backend.copies
        for svc, m in copy.members.items():
            live = copies.member(m.name)
            if live is None:
                return f"the {svc} member of {copy.site} copy {copy.slot} was removed"
            if not live.running:
                why = " (killed: out of memory)" if live.oom_killed else ""
                return (f"{m.name} ({svc}) stopped{why}\n--- last log lines ---\n"
                        f"{self.mask(copy.site, copies.logs(live, 15))}")
        return ""

    # -- fingerprints and change signals ----------------------------------------------------------------------
    def fingerprint(self, copy: Copy) -> Fingerprint:
        """Run the site's fingerprint queries in ``copy`` and hash what they print; at most ``VERIFY_SLOTS`` at once
        on this machine (many resets at once share the CPU instead of timing each other out)."""
        spec, outputs = self.core.catalog.site(copy.site), {}
        with one_of("fingerprint", VERIFY_SLOTS, timeout=600):
            for q in spec.fingerprint_queries(self.core.flavor):
                rc, out = self._exec(copy, q.service or spec.entry, list(q.run))
                if rc != 0:
                    raise DockerError(f"{spec.title}: fingerprint query '{q.name}' failed (exit {rc}): "
                                      f"{self.mask(copy.site, out)[-200:]}")
                outputs[q.name] = out
        return hashed(outputs)

    def changes(self, copy: Copy) -> str | None:
        """The site's change signal in ``copy`` (its catalog ``changes`` queries, hashed: a few milliseconds of the
        database's own log position), or None when the site declares none. Equal signals mean nothing the
        fingerprint covers changed in between, whatever path a change would have taken."""
        spec = self.core.catalog.site(copy.site)
        if not spec.changes:
            return None
        outputs = {}
        for q in spec.changes:
            rc, out = self._exec(copy, q.service or spec.entry, list(q.run))
            if rc != 0:
                raise DockerError(f"{spec.title}: change signal '{q.name}' failed (exit {rc}): "
                                  f"{self.mask(copy.site, out)[-200:]}")
            outputs[q.name] = out
        return hashed(outputs).digest

    def not_pristine(self, copy: Copy, expected: Fingerprint | None) -> str:
        """'' when ``copy`` matches the pristine fingerprint ``expected``, else why not."""
        return mismatch(expected, self.fingerprint(copy))


__all__ = ["Checks", "VERIFY_SLOTS"]
