"""A cloud lab as one lease pool (``envctl cloud serve --lab``): its members are the lab's instances on
every host, reached through each host's reset server; their lease records live in a file beside the
lab's manifest. :class:`LabStore` plugs into :class:`envctl.leases.pool.Pool` as its store.
"""
from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import requests

from envctl.catalog import Catalog
from envctl.errors import EnvctlError, UsageError
from envctl.instance import Instance
from envctl.leases.client import Lease
from envctl.leases.pool import FREE, Conflict, Member, Pool
from envctl.locks import write_private
from envctl.provision.local import InstanceSettings
from envctl.state.reset import ResetResult

LAB_AUTH_NOTE = ("lab hosts run no browser, so a lab lease carries no login state: "
                 "create it where the harness runs ('envctl login' against the lease's URLs)")


class RemoteLab:
    """One instance of a lab host, as a pool member (:class:`PoolLab`): its URLs are the ones the host
    reported (its ``envctl env --format browsergym``), its reset is the host's reset server
    (``GET <reset_url>/reset``, which answers when the reset has ended, then ``/status`` must say
    ``Ready for duty!``). ``reset_url`` carries the lab's token: it never appears in messages."""

    def __init__(self, host: str, instance: str, env: dict[str, str], reset_url: str, sites: list[str],
                 catalog: Catalog, *, reset_timeout: float = 900.0) -> None:
        self.host, self.instance, self.sites, self.catalog = host, instance, list(sites), catalog
        self.bg_env = {k: str(v).rstrip("/") for k, v in env.items()}
        self.reset_url = reset_url.rstrip("/")
        self.reset_timeout = reset_timeout
        self.auth_dir = Path(os.devnull)  # no login state (see LAB_AUTH_NOTE)

    @property
    def where(self) -> str:
        return f"{self.host}/{self.instance}"

    def settings(self) -> InstanceSettings | None:
        return None  # not on this engine

    def running(self) -> Instance:
        raise EnvctlError(f"{self.where} runs on lab host {self.host}, not on this Docker engine")

    def env(self, benchmark: str = "webarena") -> dict[str, str]:
        prefix = "WA_" if benchmark == "webarena" else "VWA_"
        out = {k[len(prefix):]: v for k, v in self.bg_env.items() if k.startswith(prefix) and k != f"{prefix}FULL_RESET"}
        if benchmark == "visualwebarena":
            out["DATASET"] = "visualwebarena"
        return out

    def login(self, sites: list[str] | None = None, *, max_age: float | None = None) -> dict[str, Path]:
        return {}

    def up(self, sites: list[str] | None = None, *, flavor: str | None = None, port_offset: int | None = None,
           login: bool = True, spares: int | None = None) -> Any:
        raise EnvctlError(f"{self.where} is brought up by 'envctl cloud up', not by a lease server")

    def _get(self, path: str, timeout: float) -> requests.Response:
        return requests.get(f"{self.reset_url}{path}", timeout=(10, timeout))

    def ready(self) -> str:
        """'' when the host's reset server says ``Ready for duty!``, else what it says."""
        try:
            r = self._get("/status", 30)
        except requests.RequestException as exc:
            return f"the reset server of {self.where} did not answer ({type(exc).__name__})"
        return "" if r.status_code == 200 and r.text.strip() == "Ready for duty!" else \
            f"the reset server of {self.where} says {r.status_code} {r.text.strip()[:120]}"

    def problems(self, sites: list[str]) -> list[str]:
        """Why ``sites`` are not ready: the reset server not idle, or a site URL not answering."""
        bad = [x for x in [self.ready()] if x]
        for s in sites:
            site = self.catalog.site(s)
            keys = [f"WA_{k}" for k in site.env.get("webarena", {})] + [f"VWA_{k}" for k in site.env.get("visualwebarena", {})]
            url = next((self.bg_env[k] for k in keys if k in self.bg_env), None)
            if url is None:
                bad.append(f"{s}: {self.where} reported no URL for it")
                continue
            try:
                r = requests.get(url, timeout=10)
                if r.status_code >= 500:
                    bad.append(f"{s}: {url} answered {r.status_code}")
            except requests.RequestException as exc:
                bad.append(f"{s}: {url} did not answer ({type(exc).__name__})")
        return bad

    def not_pristine(self, sites: list[str]) -> dict[str, str]:
        """Site -> why it does not verify pristine, as the host's reset server finds (``/verify.json``:
        probes and fingerprints, checked on the host)."""
        if not sites:
            return {}
        try:
            r = self._get("/verify.json", 120)
            found = r.json().get("sites") if r.status_code == 200 else None
        except (requests.RequestException, ValueError, AttributeError):
            found = None
        if not isinstance(found, dict):
            return {s: f"the reset server of {self.where} could not verify it" for s in sites}
        out = {}
        for s in sites:
            v = found.get(s)
            if not isinstance(v, dict) or not v.get("ok"):
                out[s] = str(v.get("why") if isinstance(v, dict) else "not verified")[:200]
        return out

    def reset(self, sites: list[str] | None = None, *, tier: str | None = None,
              replenish_async: bool = False) -> list[ResetResult]:
        """Reset the instance through its host's reset server (every site it runs; the host picks the
        tier) and check it says ``Ready for duty!``; the results are the host's (``/status.json``)."""
        t = time.monotonic()
        deadline = t + self.reset_timeout
        names = list(sites or self.sites)

        def failed(error: str) -> list[ResetResult]:
            return [ResetResult(s, False, tier or "remote", time.monotonic() - t, error=error) for s in names]

        while True:
            try:
                r = self._get("/reset", self.reset_timeout)
            except requests.RequestException as exc:
                return failed(f"the reset server of {self.where} did not answer ({type(exc).__name__})")
            if r.status_code == 200:
                break
            if r.status_code != 418 or time.monotonic() > deadline:
                return failed(f"the reset server of {self.where} answered {r.status_code} {r.text.strip()[:120]}")
            while time.monotonic() < deadline:  # another reset runs: let it end, then ours (it may predate a write)
                try:
                    if self._get("/status", 30).text.strip() != "Reset ongoing":
                        break
                except requests.RequestException:
                    pass
                time.sleep(1)
        error = self.ready()
        if error:
            return failed(error)
        seconds = time.monotonic() - t
        try:
            last = self._get("/status.json", 60).json().get("last") or []
            results = [ResetResult(str(d["site"]), bool(d["ok"]), str(d.get("tier") or "remote"), float(d["seconds"]),
                                   error=str(d.get("error") or "")) for d in last if isinstance(d, dict)]
        except (requests.RequestException, ValueError, KeyError, TypeError, AttributeError):
            results = []
        return results or [ResetResult(s, True, "remote", seconds) for s in names]


class LabStore:
    """The members of a cloud lab's pool: :class:`RemoteLab` objects named ``<host>/<instance>``, their
    lease records in ``state_file`` (JSON next to the lab's manifest, 0600, replaced atomically,
    read-modify-written under an flock), not on the hosts: the lease server is the one writer, a
    restarted one reads them back, and the hosts need no change. Sites are not healed from here (the
    hosts' own reset servers recreate what a reset cannot verify); a host's reset resets every site of
    its instance and verifies it, so nothing outside a lease is left dirty."""

    heals = False
    repairs = False  # the hosts' instances are brought up by 'envctl cloud up'
    auth_note: str | None = LAB_AUTH_NOTE

    def __init__(self, members: list[RemoteLab], state_file: Path) -> None:
        self.remotes = {r.where: r for r in members}
        self.state_file = state_file
        self._file_lock = threading.Lock()

    def names(self, pool: str) -> list[str]:
        return list(self.remotes)

    def make(self, name: str) -> RemoteLab:
        return self.remotes[name]

    def target(self, m: Member) -> list[str]:
        return list(self.remotes[m.name].sites)

    def present(self, m: Member) -> bool:
        return True

    def exists(self, m: Member) -> bool:
        return True

    def bring_up(self, pool: Pool, members: list[Member]) -> None:
        for m in members:  # the hosts' instances are brought up by 'envctl cloud up'
            pool._adopt(m)

    @contextmanager
    def _records(self) -> Iterator[dict[str, Any]]:
        """The file's ``members`` map, locked; written back (atomically, 0600) when the block ends."""
        lock_path = self.state_file.with_name(self.state_file.name + ".lock")
        with self._file_lock:
            fd = os.open(lock_path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    data = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}
                except (OSError, ValueError) as exc:
                    raise EnvctlError(f"cannot read the lease state {self.state_file}: {type(exc).__name__}",
                                      "fix or remove the file (every lease of the lab is then forgotten)") from None
                members = data.get("members") if isinstance(data, dict) else None
                members = members if isinstance(members, dict) else {}
                before = json.dumps(members, sort_keys=True)
                yield members
                if json.dumps(members, sort_keys=True) != before:
                    write_private(self.state_file, json.dumps({"members": members}, indent=1, sort_keys=True))
            finally:
                os.close(fd)

    def claim(self, m: Member, pool: str) -> tuple[dict[str, Any], list[str]]:
        with self._records() as members:
            rec = members.get(m.name)
            if not isinstance(rec, dict) or not rec:
                rec = members[m.name] = {"pool": pool, "state": FREE}
            elif rec.get("pool") not in (None, pool):
                raise UsageError(f"instance '{m.name}' belongs to pool '{rec['pool']}'", "serve that pool")
            return dict(rec), list(self.remotes[m.name].sites)

    def store(self, m: Member, record: dict[str, Any], expect: Callable[[dict[str, Any]], bool] | None) -> None:
        with self._records() as members:
            current = members.get(m.name)
            if expect is not None and not expect(current if isinstance(current, dict) else {}):
                raise Conflict(f"the lease record of {m.name} changed under us")
            members[m.name] = record

    def problems(self, m: Member, sites: list[str]) -> list[str]:
        return self.remotes[m.name].problems(sites)

    def not_pristine(self, m: Member, sites: list[str]) -> dict[str, str]:
        return self.remotes[m.name].not_pristine(sites)

    def probe(self, m: Member, site: str) -> tuple[bool, str]:
        return True, ""  # no healing from the controller

    def replenish(self, m: Member) -> bool:
        return False

    def decorate(self, m: Member, lease: Lease, full_reset: Callable[[str], str] | None) -> None:
        remote = self.remotes[m.name]
        lease.instance, lease.host, lease.auth_note = remote.instance, remote.host, LAB_AUTH_NOTE
        lease.full_reset = remote.reset_url  # BrowserGym resets through the host's own reset server
        lease.env["WA_FULL_RESET"] = lease.env["VWA_FULL_RESET"] = remote.reset_url
        lease.env["ENVCTL_INSTANCE"] = remote.instance
        lease.env["ENVCTL_HOST"] = remote.host

    def row(self, m: Member, row: dict[str, Any]) -> None:
        remote = self.remotes[m.name]
        row.update({"instance": remote.instance, "host": remote.host, "member": m.name})

    def spares(self, members: list[Member]) -> dict[tuple[str, str], int]:
        return {}


__all__ = ["LabStore", "RemoteLab", "LAB_AUTH_NOTE"]
