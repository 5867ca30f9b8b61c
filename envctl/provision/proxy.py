"""The instance's front proxy: one nginx container that owns every public port.

Which backend container serves a site is the proxy's routing table, kept inside the proxy
container (``/etc/nginx/envctl/state.json``, rendered to ``routes.conf``). Switching a site to
another copy (a reset's spare swap) rewrites the table and reloads nginx gracefully: in-flight
requests on every site finish, no URL changes. Because the table lives in the container that
applies it, it cannot drift from what is actually routed, and ``down`` removes it with the proxy.
"""
from __future__ import annotations

import io
import json
import os
import tarfile
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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

    @classmethod
    def from_json(cls, text: str) -> "ProxyState":
        raw = json.loads(text or "{}")
        routes = {k: Route(**v) for k, v in (raw.get("routes") or {}).items()}
        return cls(routes=routes, active=raw.get("active") or {}, spares=raw.get("spares") or {},
                   pristine=raw.get("pristine") or {}, wanted=raw.get("wanted") or {}, ports=raw.get("ports") or [],
                   lease=raw.get("lease") or {}, warm=raw.get("warm") or {}, planned=raw.get("planned") or {})

    def warm_slots(self, site: str) -> list[str]:
        """Every ready warm copy of ``site``, whatever snapshot it was booted from."""
        return [slot for slots in self.warm.get(site, {}).values() for slot in slots]

    def to_json(self) -> str:
        return json.dumps({"routes": {k: asdict(v) for k, v in self.routes.items()}, "active": self.active,
                           "spares": self.spares, "pristine": self.pristine, "wanted": self.wanted,
                           "ports": self.ports, **({"lease": self.lease} if self.lease else {}),
                           **({"warm": self.warm} if self.warm else {}),
                           **({"planned": self.planned} if self.planned else {})},
                          indent=1, sort_keys=True)


def proxy_name(instance: str) -> str:
    return f"envctl-{instance}-proxy"


def render(state: ProxyState, ports: list[int]) -> str:
    out = []
    for port in sorted(ports):
        r = state.routes.get(str(port))
        if r is None:
            out.append(f"server {{ listen {port}; location / {{ default_type text/plain; "
                       f"return 503 'envctl: no site is active on port {port}\\n'; }} }}")
            continue
        var = f"$envctl_backend_{port}"
        out.append(f'map $http_x_envctl_backend {var} {{\n  default "{r.backend}:{r.port}";\n'
                   + (f'  "~^({r.allow}:{r.port})$" $1;\n' if r.allow else "") + "}")
        out.append(
            f"server {{\n  listen {port};\n  location / {{\n"
            f"    proxy_pass http://{var};\n"
            "    proxy_set_header X-Envctl-Backend \"\";\n"
            "    proxy_set_header Host $http_host;\n"
            "    proxy_set_header X-Real-IP $remote_addr;\n"
            "    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
            "    proxy_set_header X-Forwarded-Proto $scheme;\n"
            "    proxy_set_header Upgrade $http_upgrade;\n"
            "    proxy_set_header Connection $connection_upgrade;\n"
            "  }\n}"
        )
    return "\n".join(out) + "\n"


def published_ports(instance: str) -> list[int]:
    c = dk.inspect(proxy_name(instance))
    if c is None:
        return []
    raw = dk.label(c, "ports")
    return [int(p) for p in raw.split(",") if p]


# A process keeps the last routing table it read or wrote. Every write also records a new generation
# in the state directory (beside the locks every writer holds), so the next read skips the
# ``docker exec cat`` (~70 ms of a ~0.3 s swap) when nobody has written since. The proxy container's id
# and start time are part of the key: a recreated or restarted proxy is read again.
_CACHE: dict[str, tuple[str, str]] = {}  # instance -> (key, routing table JSON)
_PROXY: dict[str, str] = {}  # instance -> "container id:start time" of the last proxy seen


def _generation_file(instance: str) -> Path | None:
    try:
        return lock_dir() / f"proxy-{instance}.generation"
    except (EnvctlError, OSError):
        return None


def _cache_key(instance: str) -> str:
    f = _generation_file(instance)
    try:
        gen = f.read_text() if f else ""
    except OSError:
        gen = ""
    return f"{_PROXY[instance]}:{gen}" if gen and instance in _PROXY else ""


def _forget(instance: str) -> None:
    _CACHE.pop(instance, None)
    f = _generation_file(instance)
    if f:
        f.unlink(missing_ok=True)


def _remember(instance: str, text: str) -> None:
    f = _generation_file(instance)
    if f is None or instance not in _PROXY:
        return
    tmp = f.with_name(f".{f.name}.{os.getpid()}")
    tmp.write_text(uuid.uuid4().hex)
    os.replace(tmp, f)
    _CACHE[instance] = (_cache_key(instance), text)


def read_state(instance: str) -> ProxyState | None:
    """The live routing table, or None when the instance has no (running) proxy."""
    c = dk.inspect(proxy_name(instance))
    if c is None or not c.state.running:
        return None
    _PROXY[instance] = f"{c.id}:{c.state.started_at}"
    key = _cache_key(instance)
    cached = _CACHE.get(instance)
    if key and cached and cached[0] == key:
        return ProxyState.from_json(cached[1])
    rc, out = dk.exec_argv(c, ["cat", "/etc/nginx/envctl/state.json"])
    if rc != 0:
        raise DockerError(f"cannot read the routing table of {proxy_name(instance)}: {out}")
    if key:
        _CACHE[instance] = (key, out)
    return ProxyState.from_json(out)


def apply(instance: str, state: ProxyState, ports: list[int] | None = None) -> None:
    """Install a new routing table atomically and reload nginx gracefully."""
    name = proxy_name(instance)
    ports = ports if ports is not None else published_ports(instance)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for fname, text in (("routes.conf", render(state, ports)), ("state.json", state.to_json())):
            data = text.encode()
            info = tarfile.TarInfo(fname)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    _forget(instance)  # until the new table is in place, nobody may trust a remembered one
    rc, out = dk.exec_stdin(name, ["envctl-proxy-apply", "--stdin"], buf.getvalue())
    if rc != 0:
        raise DockerError(f"proxy {name} rejected the routing table: {out}")
    _remember(instance, state.to_json())


def create(instance: str, network: str, bind: str, ports: list[int], labels: dict[str, str],
           state: ProxyState | None = None, *, image: str) -> None:
    """(Re)create the proxy from ``image`` publishing ``ports`` on ``bind``; keeps ``state`` when given.
    The image is the caller's to provide (envctl.lab builds it with envctl.images): this backend of the
    local engine never builds images."""
    name = proxy_name(instance)
    dk.remove([name])
    _forget(instance)
    spec = dk.RunSpec(
        name=name,
        image=image,
        labels={**labels, "envctl.role": "proxy", "envctl.ports": ",".join(str(p) for p in sorted(ports))},
        network=network,
        publish=[(f"{bind}:{p}", p) for p in sorted(ports)],
        memory="256m",
        # With 'proxy_socket_keepalive on' (nginx.conf) a backend that vanished without a FIN or RST
        # (cut off the network, its host gone) is detected in about 5 + 3 x 2 s instead of holding the
        # request for proxy_read_timeout.
        sysctls={"net.ipv4.tcp_keepalive_time": "5", "net.ipv4.tcp_keepalive_intvl": "2",
                 "net.ipv4.tcp_keepalive_probes": "3"},
    )
    try:
        dk.run(spec)
        dk.wait_running(name)
        state = state or ProxyState()
        state.ports = sorted(ports)
        apply(instance, state, sorted(ports))
    except BaseException:
        dk.remove([name])  # a proxy that could not publish its ports is worth nothing: leave none behind
        raise


def remove(instance: str) -> None:
    dk.remove([proxy_name(instance)])
    _forget(instance)


__all__ = ["ProxyState", "Route", "proxy_name", "read_state", "apply", "create",
           "remove", "published_ports"]
