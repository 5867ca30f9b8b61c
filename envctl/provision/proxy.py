"""The instance's front proxy: one HAProxy container (Debian's package) that owns every public port.

Which backend container serves a site is the proxy's routing table (``state.json``). It lives in the
proxy container (``/etc/envctl``, beside the HAProxy config rendered from it), and envctl reaches it,
and HAProxy's runtime API, through the proxy's **control service** (``control.lua``): an HTTP service on
the proxy's own published ports that answers only requests carrying the proxy's token (its
``envctl.control`` label, 32 random bytes) in ``X-Envctl-Control``; any other request is the site's. So:

- envctl reaches the control path wherever it reaches the sites (this machine, a lab host driving a
  shared engine through its socket), with no ``docker exec`` and no host directory the engine would
  have to share; an HTTP keep-alive request costs about a millisecond;
- reading the table is one request, and a route change is one runtime-API write (``add server``/
  ``set server`` on the live process) plus one read-back that the new server is in force: no reload;
- the config beside the table names the routed containers, so a proxy that restarts (engine restart,
  ``docker restart``) applies the same table again; ``down`` removes it with the container;
- the copy a route leaves is *drained*: it takes no new request, the ones in flight finish, and
  :func:`retire` waits for them before its containers are removed; a failed connection is retried
  (``retries``, ``option redispatch``) and, while a site's database is restored in place, requests on
  its ports are held (:func:`hold`) instead of answered with an error.
Only a change of the config's shape (a port or a site added or removed) reloads HAProxy (master-worker,
listeners passed on: no connection refused).
"""
from __future__ import annotations

import base64
import json
import os
import re
import secrets
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import requests

from envctl.errors import DockerError, EnvctlError
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


PROXY_DIR = "/etc/envctl"  # the config, the routing table and the CLI sockets, inside the proxy container
HOLD_MAP = f"{PROXY_DIR}/hold.map"
CONTROL_HEADER = "X-Envctl-Control"  # carries the proxy's token to its control service
_TOKEN = re.compile(r"^[0-9a-f]{32,128}$")
LEGACY_STATE = "/etc/nginx/envctl/state.json"  # where the nginx proxy (before the runtime API) kept the table
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # container names, as Docker allows them
_ADDR = re.compile(r"^[0-9.]+$|^[0-9a-fA-F:]+$")
_ADDR_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*:[0-9]+$")
_ALLOW = re.compile(r"^[A-Za-z0-9_.\-\[\]{}()|^$*+?]+$")
# srv_admin_state bits (HAProxy's SRV_ADMF_*): any maintenance, or drain
_MAINT, _DRAIN = 0x01 | 0x02 | 0x04 | 0x20 | 0x40, 0x08 | 0x10


def proxy_name(instance: str) -> str:
    return f"envctl-{instance}-proxy"


def control_cache(instance: str) -> Path:
    """Where this machine remembers how it last reached ``instance``'s control service (URL and token,
    0600): a hint that saves an engine call per envctl process, never the truth (the proxy's labels are);
    a stale one is refused by the proxy (wrong token) or unanswered, and looked up again."""
    return lock_dir() / f"proxy-{instance}.control"


# -- the config --------------------------------------------------------------------------------------

GLOBAL = f"""\
global
  stats socket {PROXY_DIR}/admin.sock mode 600 level admin
  stats timeout 1m
  lua-load /etc/haproxy/envctl-hold.lua
  lua-load /etc/haproxy/envctl-control.lua
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


def render(state: ProxyState, ports: list[int], token: str, *, servers: bool = True) -> str:
    """HAProxy's config for ``state``; without ``servers``, only its shape (what a route change keeps).
    Every frontend first passes a request carrying ``token`` to the control service and refuses one
    carrying another token, so no site ever sees that header."""
    if not _TOKEN.match(token):
        raise EnvctlError("refusing a malformed front-proxy token")
    out = [GLOBAL]
    for port in sorted(ports):
        r = state.routes.get(str(port))
        out.append(f"frontend p{port}\n  bind :{port}\n"
                   f"  acl envctl_control req.hdr({CONTROL_HEADER}) -m str {token}\n"
                   f"  http-request wait-for-body time 10s if envctl_control\n"
                   f"  http-request use-service lua.envctl_control if envctl_control\n"
                   f"  http-request deny deny_status 403 if {{ req.hdr({CONTROL_HEADER}) -m found }}")
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


# -- the control service ------------------------------------------------------------------------------

class ProxyUnreachable(DockerError):
    """The proxy's control service did not answer (the proxy is gone, restarting, or another one)."""


@dataclass
class Control:
    """How to reach one running proxy's control service: ``url`` (one of its published ports) and its token."""

    url: str
    token: str
    session: requests.Session = field(default_factory=requests.Session, repr=False, compare=False)
    answered: float = field(default=-1e9, repr=False, compare=False)  # time.monotonic() of its last answer

    def call(self, path: str, data: str | None = None, *, method: str = "POST", timeout: float = 15.0) -> str:
        try:
            r = self.session.request(method, f"{self.url}/.envctl/{path}", data=None if data is None else data.encode(),
                                     headers={CONTROL_HEADER: self.token}, timeout=timeout)
        except requests.RequestException as exc:
            raise ProxyUnreachable(f"the front proxy's control service at {self.url} did not answer {path} "
                                   f"within {timeout:g}s: {type(exc).__name__}",
                                   "run 'envctl up' to repair the proxy") from None
        if r.status_code != 200:
            raise ProxyUnreachable(f"the front proxy's control service at {self.url} answered HTTP {r.status_code} "
                                   f"on {path}: {r.text.strip()[:200]}", "run 'envctl up' to repair the proxy")
        self.answered = time.monotonic()
        return r.text

    def alive(self) -> bool:
        try:
            return self.call("ping", method="GET", timeout=2.0).startswith("envctl-proxy")
        except ProxyUnreachable:
            return False


_CONTROLS: dict[str, Control] = {}  # instance -> control service of its running proxy, as last found
FRESH = 2.0  # seconds after an answer during which the control service is not pinged before use


def command(ctl: Control, cmd: str, timeout: float = 10.0) -> str:
    """One write to the proxy's runtime API (commands separated by ';') and its answer."""
    return ctl.call("cmd", cmd, timeout=timeout)


def control_url(bind: str, ports: list[int]) -> str:
    """Where envctl reaches a proxy publishing ``ports`` on ``bind``: its lowest port, on loopback when it
    listens on every address."""
    host = "127.0.0.1" if bind in ("", "0.0.0.0") else "[::1]" if bind == "::" else \
        f"[{bind}]" if ":" in bind else bind
    return f"http://{host}:{min(ports)}"


def _remember(instance: str, ctl: Control) -> None:
    _CONTROLS[instance] = ctl
    try:
        f = control_cache(instance)
        tmp = f.with_name(f".{f.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"url": ctl.url, "token": ctl.token}, out)
        os.replace(tmp, f)
    except (EnvctlError, OSError):
        pass  # only a hint


def _forget(instance: str) -> None:
    _CONTROLS.pop(instance, None)
    try:
        control_cache(instance).unlink(missing_ok=True)
    except (EnvctlError, OSError):
        pass


def _hint(instance: str) -> Control | None:
    ctl = _CONTROLS.get(instance)
    if ctl is not None:
        return ctl
    try:
        raw = json.loads(control_cache(instance).read_text())
        if isinstance(raw, dict) and isinstance(raw.get("url"), str) and _TOKEN.match(str(raw.get("token"))):
            return Control(raw["url"], raw["token"])
    except (EnvctlError, OSError, ValueError):
        pass
    return None


def _locate(instance: str, wait: float = 10.0) -> tuple[Control | None, Any]:
    """(control service, None) of ``instance``'s running proxy; (None, container) for a running proxy
    without one (the nginx proxy of an older envctl); (None, None) when no proxy runs. Without an engine
    call when this machine reached the same proxy before."""
    ctl = _hint(instance)
    # one that answered this process a moment ago is taken as it is (a flip is then one request)
    if ctl is not None and (time.monotonic() - ctl.answered < FRESH or ctl.alive()):
        _CONTROLS[instance] = ctl
        return ctl, None
    _CONTROLS.pop(instance, None)
    c = dk.inspect(proxy_name(instance))
    if c is None or not c.state.running:
        return None, None
    token = dk.label(c, "control")
    ports = [int(p) for p in dk.label(c, "ports").split(",") if p.isdigit()]
    if not _TOKEN.match(token) or not ports:
        return None, c
    ctl = Control(control_url(dk.label(c, "bind", "127.0.0.1"), ports), token)
    deadline = time.monotonic() + wait  # a proxy that just (re)started answers within a second
    while not ctl.alive():
        if time.monotonic() > deadline:
            raise ProxyUnreachable(f"the front proxy {proxy_name(instance)} runs but its control service at "
                                   f"{ctl.url} does not answer", "run 'envctl up' to recreate it")
        time.sleep(0.05)
    _remember(instance, ctl)
    return ctl, None


def _write(ctl: Control, name: str, text: str) -> None:
    ctl.call(f"file/{name}", text, method="PUT")


def _load(ctl: Control) -> ProxyState:
    return ProxyState.from_json(ctl.call("file/state.json", method="GET"))


def read_state(instance: str) -> ProxyState | None:
    """The live routing table, or None when the instance has no (running) proxy."""
    ctl, legacy = _locate(instance)
    if ctl is not None:
        return _load(ctl)
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
    """Whether ``instance``'s proxy is this envctl's kind (a control service), not an older one."""
    c = dk.inspect(proxy_name(instance))
    return c is not None and controlled(c)


def controlled(c: dk.Container) -> bool:
    """Whether the proxy container ``c`` has this envctl's control service (an older proxy is replaced)."""
    return bool(_TOKEN.match(dk.label(c, "control")))


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


def _servers(ctl: Control) -> dict[str, dict[str, tuple[str, int, str]]]:
    """backend -> server -> (address, admin state, port), read from the live process."""
    return _parse_servers(command(ctl, "show servers state"))


def _parse_servers(text: str) -> dict[str, dict[str, tuple[str, int, str]]]:
    out: dict[str, dict[str, tuple[str, int, str]]] = {}
    for line in text.splitlines():
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
    ctl, _ = _locate(instance)
    if ctl is None:
        return []
    found = {n: lookup_addr(instance, n) for n in names if _NAME.match(n)}
    cmds, moved = [], []
    for be, servers in _servers(ctl).items():
        for name, (addr, _, port) in servers.items():
            ip = found.get(name)
            if ip and _ADDR.match(ip) and addr != ip and port.isdigit():
                cmds.append(f"set server {be}/{name} addr {ip} port {int(port)}")
                moved.append(name)
    for n, ip in found.items():
        if ip:
            state.addrs[n] = ip
    if cmds:
        command(ctl, "; ".join(cmds))
    return sorted(set(moved))


def _settle(instance: str, ctl: Control, state: ProxyState, cmds: list[str], timeout: float = 10.0,
            live: dict[str, dict[str, tuple[str, int, str]]] | None = None) -> None:
    """Send ``cmds`` (one write), then read back until the live servers are what ``state`` routes
    (``live``: what a write already read back)."""
    deadline = time.monotonic() + timeout
    while True:
        if cmds:
            command(ctl, "; ".join(cmds))
        cmds = _fix(instance, state, live if live is not None else _servers(ctl))
        live = None
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
    ctl, legacy = _locate(instance)
    if ctl is None:
        raise DockerError(f"the front proxy of '{instance}' is " + ("an older kind without a control socket"
                          if legacy is not None else "not running"), "run 'envctl up' to recreate it")
    ports = sorted(ports if ports is not None else (state.ports or published_ports(instance)))
    old = _load(ctl)
    shape = render(old, old.ports or ports, ctl.token, servers=False) != render(state, ports, ctl.token, servers=False)
    if len(state.addrs) > 64:  # addresses of long-gone copies
        keep = {r.backend for r in state.routes.values()}
        for name in list(state.addrs)[: len(state.addrs) - 64]:
            if name not in keep:
                del state.addrs[name]
    # the optimistic write: computed from the table as it was (no read first)
    cmds = [] if shape else _fix(instance, state, {
        f"b{p}": {r.backend: ("?", 0, str(r.port))} for p, r in old.routes.items()})
    table, config = state.to_json(), render(state, ports, ctl.token)
    if shape:
        before = ctl.call("file/haproxy.cfg", method="GET")
        _write(ctl, "state.json", table)
        _write(ctl, "haproxy.cfg", config)
        try:
            reload(instance, ctl, state)
        except BaseException:  # HAProxy kept the old config: so do the table and the file it restarts on
            _write(ctl, "haproxy.cfg", before)
            _write(ctl, "state.json", old.to_json())
            raise
    else:
        # one request: the table and the config replaced, the commands run, the servers read back
        live = ctl.call("apply", f"{len(table.encode())} {len(config.encode())}\n{table}{config}{'; '.join(cmds)}")
        _settle(instance, ctl, state, [], live=_parse_servers(live))


def _master_ready(ctl: Control) -> bool:
    """Whether HAProxy's master answers on its CLI (``master.sock``, through the control service) with a
    worker running: only then is a reload it is asked for done (one asked while it is still starting is
    lost, though the worker already answers)."""
    try:
        return " worker " in ctl.call("master", "show proc", timeout=3)
    except ProxyUnreachable:
        return False


def _ask_master(ctl: Control, cmd: str) -> bool:
    """Send ``cmd`` to HAProxy's master CLI; False when it could not be passed on."""
    try:
        ctl.call("master", cmd, timeout=5)
        return True
    except ProxyUnreachable:
        return False


def _worker_pid(ctl: Control) -> str:
    try:
        info = command(ctl, "show info", timeout=2)
    except DockerError:
        return ""
    return next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("Pid:")), "")


def reload(instance: str, ctl: Control, state: ProxyState) -> None:
    """Reload HAProxy on the config just written (master-worker: the listeners are handed over, the old
    process finishes what it has in flight) and wait until the new one serves ``state``'s routes.

    Asked on the master's CLI once the master answers there (a proxy that just started has a worker
    serving before its master is ready for a reload), again after 3 s if the worker did not change."""
    pid = _worker_pid(ctl)
    deadline = time.monotonic() + 15
    asked = -1e9
    while True:
        if time.monotonic() - asked > 3.0 and _master_ready(ctl) and _ask_master(ctl, "reload"):
            asked = time.monotonic()
        now = _worker_pid(ctl)
        if now and now != pid:
            break
        if time.monotonic() > deadline:
            raise DockerError(f"the front proxy of '{instance}' did not reload", f"see 'docker logs {proxy_name(instance)}'")
        time.sleep(0.02)
    _settle(instance, ctl, state, [])


def addressed(instance: str, keys: dict[str, str]) -> int:
    """How many requests the proxy has passed to these copies by ``X-Envctl-Backend`` (public port ->
    "container:port"), since it started; -1 when it cannot tell (no proxy). One read of the live proxy."""
    ctl, _ = _locate(instance)
    if ctl is None:
        return -1
    total = 0
    cmds = [f"show table h{int(p)} key {k}" for p, k in sorted(keys.items()) if _ADDR_KEY.match(k)]
    for m in re.finditer(r"http_req_cnt=(\d+)", command(ctl, "; ".join(cmds)) if cmds else ""):
        total += int(m.group(1))
    return total


def retire(instance: str, names: list[str], timeout: float = 30.0) -> list[str]:
    """Before ``names`` (containers) are removed: wait until the proxy has no request in flight on them
    (they are drained: no new ones arrive), then drop them from the live proxy; returns any still busy
    after ``timeout`` (removed anyway by the caller)."""
    try:
        ctl, _ = _locate(instance)
    except DockerError:
        return []
    if ctl is None:
        return []
    routed = {r.backend for r in _load(ctl).routes.values()}
    names = [n for n in names if n not in routed and _NAME.match(n)]
    deadline = time.monotonic() + timeout
    while True:
        busy, where = [], []
        for line in command(ctl, "show stat").splitlines():
            f = line.split(",")
            if len(f) > 4 and f[1] in names:
                where.append(f"{f[0]}/{f[1]}")
                if f[4] not in ("", "0"):
                    busy.append(f[1])
        if not busy or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if where:
        command(ctl, "; ".join(f"set server {w} state maint; del server {w}" for w in where))
    return busy


@contextmanager
def hold(instance: str, ports: list[int], limit: float = 60.0, drain: float = 10.0) -> Iterator[None]:
    """Hold new requests on ``ports`` (they wait in the proxy, up to ``limit`` seconds) and wait until the
    ones in flight have ended (up to ``drain``); release on exit. Used while a site's database is
    restored inside the running copy, so clients see a delay instead of an error. The hold carries a
    deadline, so a holder killed mid-way holds requests no longer than ``limit``."""
    try:
        ctl, _ = _locate(instance)
    except DockerError:
        ctl = None
    if ctl is None or not ports:
        yield
        return
    until = int(time.time() + limit)
    command(ctl, "; ".join(f"del map {HOLD_MAP} {int(p)}; add map {HOLD_MAP} {int(p)} {until}" for p in ports))
    try:
        backends = {f"b{int(p)}" for p in ports}
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline:
            rows = [ln.split(",") for ln in command(ctl, "show stat").splitlines()]
            if all(f[4] in ("", "0") for f in rows if len(f) > 4 and f[0] in backends and f[1] == "BACKEND"):
                break
            time.sleep(0.02)
        yield
    finally:
        command(ctl, "; ".join(f"del map {HOLD_MAP} {int(p)}" for p in ports))


# -- the container --------------------------------------------------------------------------------------

def create(instance: str, network: str, bind: str, ports: list[int], labels: dict[str, str],
           state: ProxyState | None = None, *, image: str) -> None:
    """(Re)create the proxy from ``image`` publishing ``ports`` on ``bind``; keeps ``state`` when given.
    The image is the caller's to provide (envctl.lab builds it with envctl.images): this backend of the
    local engine never builds images. The new proxy gets a new token; its config and table travel in its
    environment (written into the container once, at its first start)."""
    name = proxy_name(instance)
    dk.remove([name])
    _forget(instance)
    token = secrets.token_hex(32)  # hex: a token starting with "-" would read as a flag in the config
    state = state or ProxyState()
    state.ports = sorted(ports)
    b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    spec = dk.RunSpec(
        name=name,
        image=image,
        labels={**labels, "envctl.role": "proxy", "envctl.ports": ",".join(str(p) for p in sorted(ports)),
                "envctl.control": token},
        network=network,
        env={"ENVCTL_PROXY_CONFIG": b64(render(state, state.ports, token)), "ENVCTL_PROXY_STATE": b64(state.to_json())},
        publish=[(f"{bind}:{p}", p) for p in sorted(ports)],
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
        _forget(instance)
        raise


def remove(instance: str) -> None:
    dk.remove([proxy_name(instance)])
    _forget(instance)


__all__ = ["ProxyState", "Route", "Control", "ProxyUnreachable", "proxy_name", "read_state", "apply", "create",
           "remove", "published_ports", "retire", "hold", "lookup_addr", "refresh", "control_cache", "has_control", "controlled",
           "command", "control_url"]
