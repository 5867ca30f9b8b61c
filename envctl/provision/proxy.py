"""The instance's front proxy: one HAProxy container (Debian's package) that owns every public port.

Which backend container serves a site is the proxy's routing table (``state.json``). It lives in the
instance's **control directory** on the host (``<state dir>/proxy-<instance>``, 0700, bind-mounted at
``/run/envctl`` in the proxy, named by the proxy's ``envctl.control`` label), beside the HAProxy config
rendered from it and HAProxy's runtime API socket (``admin.sock``, 0600). So:

- reading the table is a file read, and a route change is one write to the control socket plus one
  read-back that the new server is in force (``set server``/``add server`` on the live process): no
  ``docker exec``, no reload, well under a millisecond;
- the config rendered beside the table names the routed containers, so a proxy that restarts (engine
  restart, ``docker restart``) applies the same table again; ``down`` removes the directory with it;
- the copy a route leaves is *drained*: it takes no new request, the ones in flight finish, and
  :func:`retire` waits for them before its containers are removed; a failed connection is retried
  (``retries``, ``option redispatch``) and, while a site's database is restored in place, requests on
  its ports are held (:func:`hold`) instead of answered with an error.
Only a change of the config's shape (a port or a site added or removed) reloads HAProxy (master-worker,
listeners passed on: no connection refused).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from envctl.errors import DockerError, EnvctlError
from envctl.images.build import PROXY_IMAGE, build, proxy_build
from envctl.locks import lock_dir
from envctl.provision import docker as dk


@dataclass
class Route:
    backend: str  # container name
    port: int  # container port of the backend
    # Copies of this site whose name matches this pattern may be addressed on this port with the
    # request header X-Envctl-Backend (used to verify and log in a spare before it is swapped in).
    allow: str = ""

BACKEND_HEADER = "X-Envctl-Backend"


@dataclass
class ProxyState:
    """Routing table: public port -> backend, plus which copy (slot) of each site is active."""

    routes: dict[str, Route] = field(default_factory=dict)  # str(public port) -> Route
    active: dict[str, str] = field(default_factory=dict)  # site -> slot
    spares: dict[str, list[str]] = field(default_factory=dict)  # site -> verified, ready slots
    pristine: dict[str, str] = field(default_factory=dict)  # site -> fingerprint JSON of its pristine state
    wanted: dict[str, int] = field(default_factory=dict)  # site -> spares to keep ready
    ports: list[int] = field(default_factory=list)  # what the proxy container publishes
    # The instance's lease when it belongs to a pool (envctl.leases): pool, state, id, holder, sites, expires.
    lease: dict[str, Any] = field(default_factory=dict)
    # Warm copies of named snapshots (envctl.state.warm): site -> snapshot name -> verified, ready slots
    # booted from that snapshot, not routed. A name present with no slot means one is wanted.
    warm: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # Sites whose ``wanted`` the capacity plan decides (not '--spares K'): site -> {"wanted": the catalog's
    # spares, "why": why it got fewer, "" when it got them}. A replenisher re-plans a site that got fewer.
    planned: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Container name -> its address on the instance's network, recorded when a spare or warm copy
    # becomes ready, so that routing it needs no engine call (a stale one is looked up again).
    addrs: dict[str, str] = field(default_factory=dict)
    # Slot -> [when it was last verified (probes and fingerprint; time.time()), requests the proxy had
    # passed to it by X-Envctl-Backend then]: a spare idle for longer than the reset's freshness bound,
    # or addressed since, is fingerprinted again before it is trusted.
    verified: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str) -> "ProxyState":
        raw = json.loads(text or "{}")
        routes = {k: Route(**v) for k, v in (raw.get("routes") or {}).items()}
        return cls(routes=routes, active=raw.get("active") or {}, spares=raw.get("spares") or {},
                   pristine=raw.get("pristine") or {}, wanted=raw.get("wanted") or {}, ports=raw.get("ports") or [],
                   lease=raw.get("lease") or {}, warm=raw.get("warm") or {}, planned=raw.get("planned") or {},
                   addrs=raw.get("addrs") or {}, verified=raw.get("verified") or {})

    def warm_slots(self, site: str) -> list[str]:
        """Every ready warm copy of ``site``, whatever snapshot it was booted from."""
        return [slot for slots in self.warm.get(site, {}).values() for slot in slots]

    def to_json(self) -> str:
        return json.dumps({"routes": {k: asdict(v) for k, v in self.routes.items()}, "active": self.active,
                           "spares": self.spares, "pristine": self.pristine, "wanted": self.wanted,
                           "ports": self.ports, **({"lease": self.lease} if self.lease else {}),
                           **({"warm": self.warm} if self.warm else {}),
                           **({"planned": self.planned} if self.planned else {}),
                           **({"addrs": self.addrs} if self.addrs else {}),
                           **({"verified": self.verified} if self.verified else {})},
                          indent=1, sort_keys=True)


CONTROL_MOUNT = "/run/envctl"  # the control directory inside the proxy container
HOLD_MAP = f"{CONTROL_MOUNT}/hold.map"
LEGACY_STATE = "/etc/nginx/envctl/state.json"  # where the nginx proxy (before the runtime API) kept the table
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # container names, as Docker allows them
_ADDR = re.compile(r"^[0-9.]+$|^[0-9a-fA-F:]+$")
_ADDR_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*:[0-9]+$")
_ALLOW = re.compile(r"^[A-Za-z0-9_.\-\[\]{}()|^$*+?]+$")
# srv_admin_state bits (HAProxy's SRV_ADMF_*): any maintenance, or drain
_MAINT, _DRAIN = 0x01 | 0x02 | 0x04 | 0x20 | 0x40, 0x08 | 0x10


def proxy_name(instance: str) -> str:
    return f"envctl-{instance}-proxy"


def ensure_image() -> None:
    if not dk.image_exists(PROXY_IMAGE):
        build(proxy_build())


def control_dir(instance: str) -> Path:
    """Where a new proxy of ``instance`` keeps its routing table, config and control socket."""
    return lock_dir() / f"proxy-{instance}"


# -- the config --------------------------------------------------------------------------------------

GLOBAL = f"""\
global
  stats socket {CONTROL_MOUNT}/admin.sock mode 600 level admin
  stats timeout 1m
  lua-load /etc/haproxy/envctl-hold.lua
  log stderr format raw local0 warning
  # after a reload (a port added or removed) the old process serves what it has in flight, then ends
  hard-stop-after 15m
resolvers docker
  nameserver dns 127.0.0.11:53
  hold valid 5s
  timeout resolve 1s
defaults
  mode http
  log global
  option dontlognull
  timeout connect 2s
  timeout client 900s
  timeout server 900s
  timeout tunnel 900s
  timeout queue 30s
  # A failed connection is retried (after the request was sent, never: it may not be idempotent), on another server
  # when one is usable (the copy just routed, when the one that failed is being drained).
  retries 3
  option redispatch 1
  retry-on conn-failure
  option forwardfor
  # a backend that vanished without a FIN or RST is detected in 5 + 3 x 2 s
  option srvtcpka
  srvtcpka-idle 5s
  srvtcpka-intvl 2s
  srvtcpka-cnt 3
"""


def render(state: ProxyState, ports: list[int], *, servers: bool = True) -> str:
    """HAProxy's config for ``state``; without ``servers``, only its shape (what a route change keeps)."""
    out = [GLOBAL]
    for port in sorted(ports):
        r = state.routes.get(str(port))
        out.append(f"frontend p{port}\n  bind :{port}")
        if r is None:
            out.append(f'  http-request return status 503 content-type text/plain string '
                       f'"envctl: no site is active on port {port}"\n')
            continue
        if r.allow and not _ALLOW.match(r.allow):
            raise EnvctlError(f"refusing the backend pattern {r.allow!r} for port {port}")
        out.append("  http-request set-header X-Real-IP %[src]\n  http-request set-header X-Forwarded-Proto http\n"
                   "  http-request lua.envctl_hold unless { req.hdr(x-envctl-backend) -m found }")
        if r.allow:
            out.append(f"  acl copy req.hdr(x-envctl-backend) -m reg '^({r.allow}):[0-9]+$'\n"
                       f"  use_backend h{port} if copy")
        out.append(f"  default_backend b{port}\n")
        out.append(f"backend b{port}\n  balance roundrobin\n  http-request del-header x-envctl-backend\n"
                   f'  http-request return status 503 content-type text/plain string '
                   f'"envctl: no copy is routed on port {port}" if {{ nbsrv(b{port}) -m int eq 0 }}')
        if servers:
            if not _NAME.match(r.backend):
                raise EnvctlError(f"refusing the backend name {r.backend!r} for port {port}")
            out.append(f"  server {r.backend} {r.backend}:{int(r.port)} init-addr libc,none")
        out.append("")
        if r.allow:
            out.append(
                f"backend h{port}\n"
                "  http-request do-resolve(txn.dst,docker,ipv4) req.hdr(x-envctl-backend),field(1,:)\n"
                '  http-request return status 502 content-type text/plain string "envctl: no such copy" '
                "if !{ var(txn.dst) -m found }\n"
                "  http-request set-dst var(txn.dst)\n"
                "  http-request set-dst-port req.hdr(x-envctl-backend),field(2,:)\n"
                # requests per addressed copy: a spare addressed after it was verified is verified again
                "  stick-table type string len 200 size 10k store http_req_cnt\n"
                "  http-request track-sc0 req.hdr(x-envctl-backend)\n"
                "  http-request del-header x-envctl-backend\n"
                "  server any 0.0.0.0:0\n")
    return "\n".join(out) + "\n"


# -- the control directory and socket ----------------------------------------------------------------

_DIRS: dict[str, Path] = {}  # instance -> control directory of its running proxy, as last found


def _alive(d: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(str(d / "admin.sock"))
        return True
    except OSError:
        return False
    finally:
        s.close()


def command(d: Path, cmd: str, timeout: float = 10.0) -> str:
    """One write to the proxy's runtime API (commands separated by ';') and its answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(d / "admin.sock"))
        s.sendall(cmd.encode() + b"\n")
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    except OSError as exc:
        raise DockerError(f"the front proxy's control socket {d / 'admin.sock'} failed: {exc}",
                          "run 'envctl up' to repair the proxy") from None
    finally:
        s.close()
    return b"".join(chunks).decode(errors="replace")


def _locate(instance: str, wait: float = 10.0) -> tuple[Path | None, Any]:
    """(control directory, None) of ``instance``'s running proxy; (None, container) for a running proxy
    without one (the nginx proxy of an older envctl); (None, None) when no proxy runs."""
    d = _DIRS.get(instance)
    if d is None:
        try:
            d = control_dir(instance)
        except (EnvctlError, OSError):
            d = None
    if d is not None and (d / "state.json").is_file() and _alive(d):
        _DIRS[instance] = d
        return d, None
    _DIRS.pop(instance, None)
    c = dk.inspect(proxy_name(instance))
    if c is None or not c.state.running:
        return None, None
    label = dk.label(c, "control")
    if not label:
        return None, c
    d = Path(label)
    deadline = time.monotonic() + wait  # a proxy that just (re)started opens its socket within a second
    while not _alive(d):
        if time.monotonic() > deadline:
            raise DockerError(f"the front proxy {proxy_name(instance)} runs but its control socket {d / 'admin.sock'} "
                              "does not answer", "run 'envctl up' to recreate it")
        time.sleep(0.05)
    _DIRS[instance] = d
    return d, None


def _write(d: Path, name: str, text: str) -> None:
    tmp = d / f".{name}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, d / name)


def _load(d: Path) -> ProxyState:
    return ProxyState.from_json((d / "state.json").read_text())


def read_state(instance: str) -> ProxyState | None:
    """The live routing table, or None when the instance has no (running) proxy."""
    d, legacy = _locate(instance)
    if d is not None:
        return _load(d)
    if legacy is None:
        return None
    rc, out = dk.exec_argv(legacy, ["cat", LEGACY_STATE])  # an older proxy: read so that 'up' can replace it
    if rc != 0:
        raise DockerError(f"cannot read the routing table of {proxy_name(instance)}: {out}")
    return ProxyState.from_json(out)


def published_ports(instance: str) -> list[int]:
    c = dk.inspect(proxy_name(instance))
    if c is None:
        return []
    raw = dk.label(c, "ports")
    return [int(p) for p in raw.split(",") if p]


def has_control(instance: str) -> bool:
    """Whether ``instance``'s proxy is this envctl's kind (a runtime API), not an older nginx one."""
    c = dk.inspect(proxy_name(instance))
    return c is not None and bool(dk.label(c, "control"))


# -- servers at run time -------------------------------------------------------------------------------

def lookup_addr(instance: str, name: str) -> str | None:
    """``name``'s address on the instance's network (an engine call: done when a copy becomes ready)."""
    c = dk.inspect(name)
    if c is None or not c.state.running:
        return None
    nets = c.network_settings.networks or {}
    net = nets.get(f"envctl-{instance}") or next(iter(nets.values()), None)
    ip = getattr(net, "ip_address", None) if net is not None else None
    return ip or None


def _servers(d: Path) -> dict[str, dict[str, tuple[str, int, str]]]:
    """backend -> server -> (address, admin state, port), read from the live process."""
    out: dict[str, dict[str, tuple[str, int, str]]] = {}
    for line in command(d, "show servers state").splitlines():
        f = line.split()
        if len(f) < 19 or not f[0].isdigit():
            continue
        out.setdefault(f[1], {})[f[3]] = (f[4], int(f[6]), f[18])
    return out


def _fix(instance: str, state: ProxyState, live: dict[str, dict[str, tuple[str, int, str]]]) -> list[str]:
    """Runtime API commands that make the live servers what ``state`` routes (none when they are)."""
    cmds: list[str] = []
    for port, r in sorted(state.routes.items()):
        be, want = f"b{port}", r.backend
        have = live.get(be, {})
        cur = have.get(want)
        if cur is None or cur[1] & (_MAINT | _DRAIN) or cur[2] != str(r.port) or cur[0] == "-":
            ip = state.addrs.get(want)
            if ip is None or (cur is not None and cur[0] == ip and cur[1] & 0x20):
                ip = lookup_addr(instance, want)
                if ip:
                    state.addrs[want] = ip
            if ip and _NAME.match(want) and _ADDR.match(ip):
                if cur is None:
                    cmds.append(f"add server {be}/{want} {ip}:{int(r.port)}")
                cmds += [f"set server {be}/{want} addr {ip} port {int(r.port)}", f"set server {be}/{want} state ready"]
            elif cur is None or cur[1] & (_MAINT | _DRAIN) == 0:
                continue  # no such container (yet): nothing can be routed to it; what serves keeps serving
        for other, (_, admin, _) in have.items():
            if other != want and not admin & (_MAINT | _DRAIN):
                cmds.append(f"set server {be}/{other} state drain")
    return cmds


def refresh(instance: str, state: ProxyState, names: list[str]) -> list[str]:
    """Look ``names`` (containers) up again and point the live servers of that name at where they are now:
    a container restarted alone may have a new address, which nothing else would notice until its next
    route change. ``state.addrs`` is updated (the caller's table, written when its block ends); returns
    the names whose address changed. Engine calls: used by 'up' when it repairs a running copy."""
    d, _ = _locate(instance)
    if d is None:
        return []
    found = {n: lookup_addr(instance, n) for n in names if _NAME.match(n)}
    cmds, moved = [], []
    for be, servers in _servers(d).items():
        for name, (addr, _, port) in servers.items():
            ip = found.get(name)
            if ip and _ADDR.match(ip) and addr != ip and port.isdigit():
                cmds.append(f"set server {be}/{name} addr {ip} port {int(port)}")
                moved.append(name)
    for n, ip in found.items():
        if ip:
            state.addrs[n] = ip
    if cmds:
        command(d, "; ".join(cmds))
    return sorted(set(moved))


def _settle(instance: str, d: Path, state: ProxyState, cmds: list[str], timeout: float = 10.0) -> None:
    """Send ``cmds`` (one write), then read back until the live servers are what ``state`` routes."""
    deadline = time.monotonic() + timeout
    while True:
        if cmds:
            command(d, "; ".join(cmds))
        cmds = _fix(instance, state, _servers(d))
        if not cmds:
            return
        if time.monotonic() > deadline:
            raise DockerError(f"the front proxy of '{instance}' did not take the new routes: {'; '.join(cmds)[:300]}",
                              "run 'envctl up' to repair it")
        time.sleep(0.02)


def apply(instance: str, state: ProxyState, ports: list[int] | None = None) -> None:
    """Make ``state`` the routing table: written beside the config, then in force in the live proxy.

    A route change is one write to the runtime API (the new server in, the old one drained) and one
    read-back; a change of the config's shape (ports, which ports route) reloads HAProxy gracefully."""
    d, legacy = _locate(instance)
    if d is None:
        raise DockerError(f"the front proxy of '{instance}' is " + ("an older kind without a control socket"
                          if legacy is not None else "not running"), "run 'envctl up' to recreate it")
    ports = sorted(ports if ports is not None else (state.ports or published_ports(instance)))
    old = _load(d)
    shape = render(old, old.ports or ports, servers=False) != render(state, ports, servers=False)
    if len(state.addrs) > 64:  # addresses of long-gone copies
        keep = {r.backend for r in state.routes.values()}
        for name in list(state.addrs)[: len(state.addrs) - 64]:
            if name not in keep:
                del state.addrs[name]
    # the optimistic write: computed from the table as it was (no read first)
    cmds = [] if shape else _fix(instance, state, {
        f"b{p}": {r.backend: ("?", 0, str(r.port))} for p, r in old.routes.items()})
    before = (d / "haproxy.cfg").read_text()
    _write(d, "state.json", state.to_json())
    _write(d, "haproxy.cfg", render(state, ports))
    if shape:
        try:
            reload(instance, d, state)
        except BaseException:  # HAProxy kept the old config: so do the table and the file it restarts on
            _write(d, "haproxy.cfg", before)
            _write(d, "state.json", old.to_json())
            raise
    else:
        _settle(instance, d, state, cmds)


def _master_ready(d: Path) -> bool | None:
    """Whether HAProxy's master answers on its CLI (``master.sock``) with a worker running: only then is a
    reload it is asked for done (one asked, or a SIGUSR2 sent, while it is still starting is lost, though
    the worker's socket already answers). None when there is no master socket (an older proxy)."""
    if not (d / "master.sock").exists():
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1)
    try:
        s.connect(str(d / "master.sock"))
        s.sendall(b"show proc\n")
        out = b""
        while b"# programs" not in out:  # the master's CLI keeps the connection: read up to the last section
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return b" worker " in out
    except OSError:
        return False
    finally:
        s.close()


def _ask_master(d: Path, cmd: str) -> bool:
    """Send ``cmd`` to HAProxy's master CLI; False when nothing listens there."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(str(d / "master.sock"))
        s.sendall(cmd.encode() + b"\n")
        return True
    except OSError:
        return False
    finally:
        s.close()


def _worker_pid(d: Path) -> str:
    try:
        info = command(d, "show info", timeout=2)
    except DockerError:
        return ""
    return next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("Pid:")), "")


def reload(instance: str, d: Path, state: ProxyState) -> None:
    """Reload HAProxy on the config just written (master-worker: the listeners are handed over, the old
    process finishes what it has in flight) and wait until the new one serves ``state``'s routes.

    Asked on the master's CLI once the master answers there (a proxy that just started has a worker
    serving before its master is ready for a reload); a proxy without that socket is sent SIGUSR2, again
    each second."""
    pid = _worker_pid(d)
    deadline = time.monotonic() + 15
    asked = -1e9
    while True:
        if time.monotonic() - asked > 3.0:
            ready = _master_ready(d)
            if ready is None:
                dk.signal(proxy_name(instance), "SIGUSR2")
                asked = time.monotonic() - 2.0  # again after a second
            elif ready and _ask_master(d, "reload"):
                asked = time.monotonic()
        now = _worker_pid(d)
        if now and now != pid:
            break
        if time.monotonic() > deadline:
            raise DockerError(f"the front proxy of '{instance}' did not reload", f"see 'docker logs {proxy_name(instance)}'")
        time.sleep(0.02)
    _settle(instance, d, state, [])


def addressed(instance: str, keys: dict[str, str]) -> int:
    """How many requests the proxy has passed to these copies by ``X-Envctl-Backend`` (public port ->
    "container:port"), since it started; -1 when it cannot tell (no proxy). One read of the live proxy."""
    d, _ = _locate(instance)
    if d is None:
        return -1
    total = 0
    cmds = [f"show table h{int(p)} key {k}" for p, k in sorted(keys.items()) if _ADDR_KEY.match(k)]
    for m in re.finditer(r"http_req_cnt=(\d+)", command(d, "; ".join(cmds)) if cmds else ""):
        total += int(m.group(1))
    return total


def retire(instance: str, names: list[str], timeout: float = 30.0) -> list[str]:
    """Before ``names`` (containers) are removed: wait until the proxy has no request in flight on them
    (they are drained: no new ones arrive), then drop them from the live proxy; returns any still busy
    after ``timeout`` (removed anyway by the caller)."""
    try:
        d, _ = _locate(instance)
    except DockerError:
        return []
    if d is None:
        return []
    routed = {r.backend for r in _load(d).routes.values()}
    names = [n for n in names if n not in routed and _NAME.match(n)]
    deadline = time.monotonic() + timeout
    while True:
        busy, where = [], []
        for line in command(d, "show stat").splitlines():
            f = line.split(",")
            if len(f) > 4 and f[1] in names:
                where.append(f"{f[0]}/{f[1]}")
                if f[4] not in ("", "0"):
                    busy.append(f[1])
        if not busy or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if where:
        command(d, "; ".join(f"set server {w} state maint; del server {w}" for w in where))
    return busy


@contextmanager
def hold(instance: str, ports: list[int], limit: float = 60.0, drain: float = 10.0) -> Iterator[None]:
    """Hold new requests on ``ports`` (they wait in the proxy, up to ``limit`` seconds) and wait until the
    ones in flight have ended (up to ``drain``); release on exit. Used while a site's database is
    restored inside the running copy, so clients see a delay instead of an error. The hold carries a
    deadline, so a holder killed mid-way holds requests no longer than ``limit``."""
    try:
        d, _ = _locate(instance)
    except DockerError:
        d = None
    if d is None or not ports:
        yield
        return
    until = int(time.time() + limit)
    command(d, "; ".join(f"del map {HOLD_MAP} {int(p)}; add map {HOLD_MAP} {int(p)} {until}" for p in ports))
    try:
        backends = {f"b{int(p)}" for p in ports}
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline:
            rows = [ln.split(",") for ln in command(d, "show stat").splitlines()]
            if all(f[4] in ("", "0") for f in rows if len(f) > 4 and f[0] in backends and f[1] == "BACKEND"):
                break
            time.sleep(0.02)
        yield
    finally:
        command(d, "; ".join(f"del map {HOLD_MAP} {int(p)}" for p in ports))


# -- the container --------------------------------------------------------------------------------------

def create(instance: str, network: str, bind: str, ports: list[int], labels: dict[str, str],
           state: ProxyState | None = None) -> None:
    """(Re)create the proxy publishing ``ports`` on ``bind``; keeps ``state`` when given."""
    ensure_image()
    name = proxy_name(instance)
    dk.remove([name])
    _DIRS.pop(instance, None)
    d = control_dir(instance)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(d, 0o700)
    (d / "admin.sock").unlink(missing_ok=True)
    state = state or ProxyState()
    state.ports = sorted(ports)
    _write(d, "state.json", state.to_json())
    _write(d, "haproxy.cfg", render(state, state.ports))
    _write(d, "hold.map", "")
    spec = dk.RunSpec(
        name=name,
        image=PROXY_IMAGE,
        labels={**labels, "envctl.role": "proxy", "envctl.ports": ",".join(str(p) for p in sorted(ports)),
                "envctl.control": str(d)},
        network=network,
        publish=[(f"{bind}:{p}", p) for p in sorted(ports)],
        volumes=[(str(d), CONTROL_MOUNT, "rw")],
        memory="256m",
    )
    try:
        dk.run(spec)
        dk.wait_running(name)
        found, _ = _locate(instance)
        if found is None:
            raise DockerError(f"the front proxy {name} did not start", f"see 'docker logs {name}'")
        _settle(instance, found, state, [])
    except BaseException:
        dk.remove([name])  # a proxy that could not publish its ports is worth nothing: leave none behind
        raise


def remove(instance: str) -> None:
    c = dk.inspect(proxy_name(instance))
    label = dk.label(c, "control") if c is not None else ""
    dk.remove([proxy_name(instance)])
    _DIRS.pop(instance, None)
    for d in {Path(label)} if label else set():
        if d.name == f"proxy-{instance}":
            shutil.rmtree(d, ignore_errors=True)


__all__ = ["ProxyState", "Route", "PROXY_IMAGE", "proxy_name", "ensure_image", "read_state", "apply", "create",
           "remove", "published_ports", "retire", "hold", "lookup_addr", "refresh", "control_dir", "has_control", "command"]
