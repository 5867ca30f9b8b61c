"""The instance's front proxy: one HAProxy container (Debian's package; a service on a swarm) that owns every public port.

Which backend container serves a site is the proxy's routing table (``state.json``). It lives in the
proxy container (``/etc/envctl``, beside the HAProxy config rendered from it), and envctl reaches it,
and HAProxy's runtime API, through the proxy's **control service** (``control.lua``): an HTTP service on
the proxy's own published ports that answers only requests carrying the proxy's token (its
``envctl.control`` label, 32 random bytes) in ``X-Envctl-Control``; any other request is the site's. So:

- envctl reaches the control path wherever it reaches the sites (this machine, or a swarm node's address),
  with no ``docker exec`` and no host directory the engine would
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import requests

from envctl.backends.base import InstanceSettings, ProxyInfo, ProxySpec, proxy_name
from envctl.errors import DockerError, EnvctlError
from envctl.locks import state_dir
from envctl.routing.table import Route, RoutingTable

BACKEND_HEADER = "X-Envctl-Backend"
# envctl's own requests to a site (probes, HTTP logins, login checks) carry a token derived from the proxy's own in
# this header; the proxy counts every other request per public port (``activity``), so a pool knows whether anyone
# reached a site since it was verified, and removes the header before the site sees the request
OWN_HEADER = "X-Envctl-Own"


PROXY_DIR = "/etc/envctl"  # the config, the routing table and the CLI sockets, inside the proxy container
HOLD_MAP = f"{PROXY_DIR}/hold.map"
CONTROL_HEADER = "X-Envctl-Control"  # carries the proxy's token to its control service
_TOKEN = re.compile(r"^[0-9a-f]{32,128}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # container names, as Docker allows them
_ADDR = re.compile(r"^[0-9.]+$|^[0-9a-fA-F:]+$")
# HAProxy's answer to 'set server ... addr' for a server that has no address family yet (init-addr none)
_NO_FAMILY = "current server address family is only supported through configuration file"
_ADDR_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*:[0-9]+$")
_ALLOW = re.compile(r"^[A-Za-z0-9_.\-\[\]{}()|^$*+?]+$")
# srv_admin_state bits (HAProxy's SRV_ADMF_*): any maintenance, or drain
_MAINT, _DRAIN = 0x01 | 0x02 | 0x04 | 0x20 | 0x40, 0x08 | 0x10


def control_cache(instance: str) -> Path:
    """Where this machine remembers how it last reached ``instance``'s control service (URL and token,
    0600): a hint that saves an engine call per envctl process, never the truth (the proxy's labels are);
    a stale one is refused by the proxy (wrong token) or unanswered, and looked up again."""
    return state_dir() / f"proxy-{instance}.control"


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


def own_token(token: str) -> str:
    """The value of :data:`OWN_HEADER` for the proxy whose control token is ``token`` (it does not give control)."""
    import hashlib

    return hashlib.sha256(f"{token}:own".encode()).hexdigest()[:32]


def render(state: RoutingTable, ports: list[int], token: str, *, servers: bool = True) -> str:
    """HAProxy's config for ``state``; without ``servers``, only its shape (what a route change keeps).
    Every frontend first passes a request carrying ``token`` to the control service and refuses one
    carrying another token, so no site ever sees that header."""
    if not _TOKEN.match(token):
        raise EnvctlError("refusing a malformed front-proxy token")
    out = [GLOBAL]
    for port in sorted(ports):
        r = state.routes.by_port.get(str(port))
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
        # requests that are not envctl's own, counted per port (the frontend's table: one key, its port)
        out.append(f"  acl envctl_own req.hdr({OWN_HEADER}) -m str {own_token(token)}\n"
                   "  stick-table type integer size 1 store http_req_cnt\n"
                   "  http-request track-sc1 dst_port unless envctl_own\n"
                   f"  http-request del-header {OWN_HEADER}")
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


def remember(instance: str, ctl: Control) -> None:
    _CONTROLS[instance] = ctl
    tmp: Path | None = None
    try:
        f = control_cache(instance)
        tmp = f.with_name(f".{f.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"url": ctl.url, "token": ctl.token}, out)
        os.replace(tmp, f)
    except (EnvctlError, OSError):
        if tmp is not None:  # only a hint; a full disk leaves no half-written one
            tmp.unlink(missing_ok=True)


def forget(instance: str) -> None:
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


def locate(instance: str, info: ProxyInfo | None, wait: float = 10.0) -> Control | None:
    """The control service of ``instance``'s running proxy (as the backend found it: ``info``), or None when no
    proxy of this envctl's kind runs; waits up to ``wait`` s for one that just (re)started to answer."""
    if info is None or not info.running or not _TOKEN.match(info.token) or not info.ports:
        return None
    ctl = Control(control_url(info.host, info.ports), info.token)
    deadline = time.monotonic() + wait
    while not ctl.alive():
        if time.monotonic() > deadline:
            raise ProxyUnreachable(f"the front proxy {proxy_name(instance)} runs but its control service at "
                                   f"{ctl.url} does not answer", "run 'envctl up' to recreate it")
        time.sleep(0.05)
    remember(instance, ctl)
    return ctl


def known(instance: str) -> Control | None:
    """The control service this process (or machine) reached last for ``instance``, if it still answers: no engine
    call. One that answered this process a moment ago is taken as it is (a flip is then one request)."""
    ctl = _hint(instance)
    if ctl is not None and (time.monotonic() - ctl.answered < FRESH or ctl.alive()):
        _CONTROLS[instance] = ctl
        return ctl
    _CONTROLS.pop(instance, None)
    return None


def _write(ctl: Control, name: str, text: str) -> None:
    ctl.call(f"file/{name}", text, method="PUT")


def load(ctl: Control) -> RoutingTable:
    """The routing table the proxy holds (one request)."""
    return RoutingTable.from_json(ctl.call("file/state.json", method="GET"))


# -- servers at run time -------------------------------------------------------------------------------

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


def _fix(state: RoutingTable, live: dict[str, dict[str, tuple[str, int, str]]],
         tried: set[str] | frozenset[str] = frozenset()) -> tuple[list[str], list[str]]:
    """(runtime API commands that make the live servers what ``state`` routes, the routed members whose address
    ``state`` lacks or HAProxy could not use: the caller looks them up). A member in ``tried`` was already sent
    its recorded address once and HAProxy still could not use it (its copy is stopped: after a reboot, the
    table still routes to the copies that ran before): it is reported, not sent again."""
    cmds: list[str] = []
    unknown: list[str] = []
    addrs = state.routes.addrs
    for port, r in sorted(state.routes.by_port.items()):
        be, want = f"b{port}", r.backend
        have = live.get(be, {})
        cur = have.get(want)
        if cur is None or cur[1] & (_MAINT | _DRAIN) or cur[2] != str(r.port) or cur[0] == "-":
            ip = addrs.get(want)
            if ip is None or (cur is not None and (cur[0] == "-" or cur[0] == ip and cur[1] & 0x20)):
                unknown.append(want)  # not recorded, or recorded but unusable (no address, resolution maintenance)
                if ip is None or want in tried:
                    continue  # nothing more to send: the caller looks its address up (a stopped copy has none)
            if _NAME.match(want) and _ADDR.match(ip):
                if cur is None:
                    cmds.append(f"add server {be}/{want} {ip}:{int(r.port)}")
                cmds += [f"set server {be}/{want} addr {ip} port {int(r.port)}", f"set server {be}/{want} state ready"]
        for other, (_, admin, _) in have.items():
            if other != want and not admin & (_MAINT | _DRAIN):
                cmds.append(f"set server {be}/{other} state drain")
    return cmds, unknown


def refresh(ctl: Control, found: dict[str, str | None]) -> list[str]:
    """Point the live servers named in ``found`` (member -> its address now) at that address: a member restarted
    alone may have a new one, which nothing else would notice until its next route change. Returns the names
    whose address changed."""
    cmds, moved = [], []
    for be, servers in _servers(ctl).items():
        for name, (addr, _, port) in servers.items():
            ip = found.get(name)
            if ip and _ADDR.match(ip) and addr != ip and port.isdigit():
                cmds.append(f"set server {be}/{name} addr {ip} port {int(port)}")
                moved.append(name)
    if cmds:
        command(ctl, "; ".join(cmds))
    return sorted(set(moved))


def settle(ctl: Control, state: RoutingTable, cmds: list[str] | None = None, timeout: float = 10.0,
           live: dict[str, dict[str, tuple[str, int, str]]] | None = None) -> list[str]:
    """Send ``cmds`` (one write), then read back until the live servers are what ``state`` routes (``live``: what a
    write already read back). Returns the routed members whose address must be looked up first ([] when done)."""
    deadline = time.monotonic() + timeout
    cmds = list(cmds or [])
    tried: set[str] = set()
    reloaded = False
    while True:
        if cmds and _NO_FAMILY in command(ctl, "; ".join(cmds)) and not reloaded:
            # a server whose name did not resolve when HAProxy started (its copy was stopped: the proxy started
            # first after a reboot) takes no address at run time: a reload resolves the names again
            _reload_worker(ctl)
            reloaded = True
        cmds, unknown = _fix(state, live if live is not None else _servers(ctl), tried)
        tried.update(unknown)
        live = None
        if unknown and not cmds:
            return unknown
        if not cmds:
            return []
        if time.monotonic() > deadline:
            raise DockerError(f"the front proxy at {ctl.url} did not take the new routes: {'; '.join(cmds)[:300]}",
                              "run 'envctl up' to repair it")
        time.sleep(0.02)


def apply(ctl: Control, state: RoutingTable) -> list[str]:
    """Make ``state`` the routing table: written beside the config, then in force in the live proxy. Returns the
    routed members whose address ``state`` lacks (the caller looks them up and applies again).

    A route change is one write to the runtime API (the new server in, the old one drained) and one read-back;
    a change of the config's shape (ports, which ports route) reloads HAProxy gracefully."""
    old = load(ctl)
    ports = sorted(state.routes.ports or old.routes.ports)
    shape = render(old, old.routes.ports or ports, ctl.token, servers=False) != render(state, ports, ctl.token, servers=False)
    addrs = state.routes.addrs
    if len(addrs) > 64:  # addresses of long-gone copies
        keep = {r.backend for r in state.routes.by_port.values()}
        for name in list(addrs)[: len(addrs) - 64]:
            if name not in keep:
                del addrs[name]
    # the optimistic write: computed from the table as it was (no read first)
    cmds = [] if shape else _fix(state, {f"b{p}": {r.backend: ("?", 0, str(r.port))}
                                         for p, r in old.routes.by_port.items()})[0]
    table, config = state.to_json(), render(state, ports, ctl.token)
    if shape:
        before = ctl.call("file/haproxy.cfg", method="GET")
        _write(ctl, "state.json", table)
        _write(ctl, "haproxy.cfg", config)
        try:
            return reload(ctl, state)
        except BaseException:  # HAProxy kept the old config: so do the table and the file it restarts on
            _write(ctl, "haproxy.cfg", before)
            _write(ctl, "state.json", old.to_json())
            raise
    # one request: the table and the config replaced, the commands run, the servers read back
    live = ctl.call("apply", f"{len(table.encode())} {len(config.encode())}\n{table}{config}{'; '.join(cmds)}")
    return settle(ctl, state, live=_parse_servers(live))


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


def reload(ctl: Control, state: RoutingTable) -> list[str]:
    """Reload HAProxy on the config just written (master-worker: the listeners are handed over, the old
    process finishes what it has in flight) and wait until the new one serves ``state``'s routes.

    Asked on the master's CLI once the master answers there (a proxy that just started has a worker
    serving before its master is ready for a reload), again after 3 s if the worker did not change."""
    _reload_worker(ctl)
    return settle(ctl, state)


def _reload_worker(ctl: Control) -> None:
    """Ask HAProxy's master to reload on the config file as it is; wait until a new worker serves."""
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
            raise DockerError(f"the front proxy at {ctl.url} did not reload", "see the proxy's logs ('docker logs')")
        time.sleep(0.02)


def addressed(ctl: Control, keys: dict[str, str]) -> int:
    """How many requests the proxy has passed to these copies by ``X-Envctl-Backend`` (public port ->
    "member:port"), since it started. One read of the live proxy."""
    total = 0
    cmds = [f"show table h{int(p)} key {k}" for p, k in sorted(keys.items()) if _ADDR_KEY.match(k)]
    for m in re.finditer(r"http_req_cnt=(\d+)", command(ctl, "; ".join(cmds)) if cmds else ""):
        total += int(m.group(1))
    return total


@dataclass(frozen=True)
class Activity:
    """What reached an instance's sites through its proxy: the live HAProxy process (``process``: its pid and start
    time; a restart or reload starts the counts again) and, per public port, how many requests that were not
    envctl's own it has passed (``counts``) and the member routed there (``routes``)."""

    process: str
    counts: dict[str, int]
    routes: dict[str, str]
    sites: dict[str, list[str]] = field(default_factory=dict)  # site -> its public ports (when the reader knew)

    def untouched(self, since: "Activity", port: str) -> bool:
        """Whether nothing but envctl reached ``port`` between ``since`` and this reading, on the same copy."""
        return (self.process == since.process and port in self.counts and self.counts[port] == since.counts.get(port)
                and self.routes.get(port) == since.routes.get(port))

    def same_copy(self, since: "Activity", port: str) -> bool:
        """Whether the same copy serves ``port`` as at ``since``, in the same proxy process (reads aside)."""
        return self.process == since.process and bool(self.routes.get(port)) and \
            self.routes.get(port) == since.routes.get(port)


def activity(ctl: Control, ports: list[int]) -> Activity:
    """The proxy's request counts and routes for ``ports`` (two requests: the runtime API, the table)."""
    cmds = ["show info"] + [f"show table p{int(p)}" for p in sorted(ports)]
    text = command(ctl, "; ".join(cmds))
    info = dict(re.findall(r"^(Pid|Start_time_sec): (\S+)$", text, re.M))
    counts = {m.group(1)[1:]: int(m.group(2)) for m in re.finditer(
        r"^# table: (p[0-9]+),.*\n(?:0x[0-9a-f]+: key=[0-9]+ .*http_req_cnt=([0-9]+))?", text, re.M)
        if m.group(2) is not None}
    for p in ports:  # a port no request reached yet has an empty table
        if f"# table: p{int(p)}," in text:
            counts.setdefault(str(int(p)), 0)
    table = load(ctl)
    routes = {str(int(p)): table.routes.by_port[str(int(p))].backend for p in ports if str(int(p)) in table.routes.by_port}
    return Activity(f"{info.get('Pid', '?')}@{info.get('Start_time_sec', '?')}", counts, routes)


def stat(ctl: Control, backends: list[str]) -> list[list[str]]:
    """The CSV rows of ``show stat`` for ``backends`` only (their servers and the BACKEND line). Never the whole
    table: HAProxy 2.6's CLI can stall an answer that ends at its 16 kB buffer's edge (a whole instance's
    ``show stat`` does, every other time), so each answer is kept to a backend's few lines."""
    names = [b for b in dict.fromkeys(backends) if _NAME.match(b)]
    if not names:
        return []
    text = command(ctl, "; ".join(f"show stat {b} -1 -1" for b in names))
    return [ln.split(",") for ln in text.splitlines() if ln and not ln.startswith("#")]


def retire(ctl: Control, names: list[str], timeout: float = 30.0) -> list[str]:
    """Before ``names`` (members) are removed: wait until the proxy has no request in flight on them
    (they are drained: no new ones arrive), then drop them from the live proxy; returns any still busy
    after ``timeout`` (removed anyway by the caller)."""
    by_port = load(ctl).routes.by_port
    routed = {r.backend for r in by_port.values()}
    names = [n for n in names if n not in routed and _NAME.match(n)]
    ports = [p for p, r in by_port.items() if any(re.fullmatch(r.allow or "", n) for n in names)]
    deadline = time.monotonic() + timeout
    busy: list[str] = []
    where: list[str] = []
    while names:
        busy, where = [], []
        for f in stat(ctl, [f"{kind}{p}" for p in ports for kind in ("b", "h")]):
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
def hold(ctl: Control | None, ports: list[int], limit: float = 60.0, drain: float = 10.0) -> Iterator[None]:
    """Hold new requests on ``ports`` (they wait in the proxy, up to ``limit`` seconds) and wait until the
    ones in flight have ended (up to ``drain``); release on exit. Used while a site's database is
    restored inside the running copy, so clients see a delay instead of an error. The hold carries a
    deadline, so a holder killed mid-way holds requests no longer than ``limit``."""
    if ctl is None or not ports:
        yield
        return
    until = int(time.time() + limit)
    command(ctl, "; ".join(f"del map {HOLD_MAP} {int(p)}; add map {HOLD_MAP} {int(p)} {until}" for p in ports))
    try:
        backends = [f"b{int(p)}" for p in ports]
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline:
            if all(f[4] in ("", "0") for f in stat(ctl, backends) if len(f) > 4 and f[1] == "BACKEND"):
                break
            time.sleep(0.02)
        yield
    finally:
        command(ctl, "; ".join(f"del map {HOLD_MAP} {int(p)}" for p in ports))


# -- a new proxy ---------------------------------------------------------------------------------------

def spec(settings: InstanceSettings, ports: list[int], state: RoutingTable, image: str) -> ProxySpec:
    """What a new proxy of ``settings``'s instance is: ``image`` publishing ``ports`` on its bind address, a new
    token (its ``envctl.control`` label), its config and table in its environment (written into it once, at its
    first start)."""
    token = secrets.token_hex(32)  # hex: a token starting with "-" would read as a flag in the config
    state.routes.ports = sorted(ports)
    state.settings = settings.labels()
    b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    return ProxySpec(settings.name, image, settings.bind, sorted(ports),
                     {**settings.labels(), "envctl.role": "proxy",
                      "envctl.ports": ",".join(str(p) for p in sorted(ports)), "envctl.control": token},
                     {"ENVCTL_PROXY_CONFIG": b64(render(state, state.routes.ports, token)),
                      "ENVCTL_PROXY_STATE": b64(state.to_json())})


__all__ = ["Route", "Control", "ProxyUnreachable", "locate", "known", "load", "apply", "settle", "refresh", "retire",
           "hold", "addressed", "spec", "stat", "forget", "remember", "control_cache", "command", "control_url", "render",
           "BACKEND_HEADER", "OWN_HEADER", "own_token", "Activity", "activity", "proxy_name"]
