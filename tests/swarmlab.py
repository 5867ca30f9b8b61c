"""A throwaway multi-node Docker Swarm for tests: Docker engines running inside containers.

Layout (all on the host engine, everything named ``envctl-swarmtest-*`` and labelled
``envctl.test=swarmlab``; a lab with a ``name`` uses ``envctl-swarmtest-<name>-*`` and
``envctl.test=swarmlab-<name>`` instead, see "Side by side" below)::

    host engine
    └── bridge network envctl-swarmtest-net (172.31.250.0/24 by default)
        ├── envctl-swarmtest-registry  .2   Debian's docker-registry on :5000, also 127.0.0.1:<port> on the host
        ├── envctl-swarmtest-node1     .11  dockerd on tcp://IP:2375 (no TLS), swarm manager
        ├── envctl-swarmtest-node2     .12  dockerd, swarm worker
        └── envctl-swarmtest-node3     .13  dockerd, swarm worker

The host engine pushes to ``registry_push`` (127.0.0.1:PORT, trusted as insecure by every dockerd);
the nodes pull from ``registry`` (the registry's bridge IP, started with ``--insecure-registry``).
Node engines are not privileged (this machine refuses ``--privileged``): they run with all
capabilities but SYS_RESOURCE, seccomp/apparmor/systempaths unconfined and the host's cgroup v1
tree bind-mounted; the inner /var/lib/docker is an anonymous volume (overlay2 on the host fs).
The kernel has no IPVS: use ``--endpoint-mode dnsrr`` and host-mode published ports.

Use::

    with SwarmLab() as lab:
        ref = lab.push("envctl-mini/base:1")          # -> "172.31.250.2:5000/envctl-mini/base:1"
        lab.docker("service", "create", "--name", "web", "--endpoint-mode", "dnsrr", ..., ref)
        lab.kill_node("node3"); lab.start_node("node3")

Side by side: ``SwarmLab(name="bench", subnet="172.31.251.0/24", registry_port=54800)`` is a lab of its own.
Its containers, network and push tags are named ``envctl-swarmtest-bench-*`` (registry ``…-bench-registry``,
nodes ``…-bench-node1``…, network ``…-bench-net``), labelled ``envctl.test=swarmlab-bench``, and its
``cleanup_leftovers()`` removes only those (and its push tags: ports ``registry_port`` to ``registry_port`` + 199).
The default lab (``name=""``) keeps the names above; its cleanup skips what belongs to a named lab (a name with
one more ``-`` after the prefix, or another ``envctl.test`` value). A name is lower-case letters and digits.
Give every lab its own ``subnet`` and ``registry_port``: two labs on one subnet are refused (overlap check).

Machines for Ansible: ``SwarmLab(ssh_key=PUBKEY, form_swarm=False)`` starts the nodes from ``SSH_NODE_IMAGE``
(sshd for root with that key, Python) and forms no swarm (``envctl cloud up`` does). Such a node boots like a
sysvinit Debian machine under tini: its engine is Debian's ``/etc/init.d/docker`` (start-stop-daemon, flags in
``/etc/default/docker``), so ``service docker restart`` restarts it, and it trusts registries through
``/etc/docker/daemon.json`` only (``daemon_json={"node2": {...}}``: its content at the first boot; none by
default). ``no_engine=["node3"]`` starts that node from ``BARE_SSH_NODE_IMAGE``: Debian with sshd and Python, no
Docker, for a play to install docker.io on (from the network).

Run ``python tests/swarmlab.py [--name NAME --subnet CIDR --registry-port PORT]`` for a demo with timings.
Stdlib + python_on_whales only.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Sequence

PREFIX = "envctl-swarmtest-"
LABEL_KEY, LABEL_VALUE = "envctl.test", "swarmlab"
LABEL = f"{LABEL_KEY}={LABEL_VALUE}"
NODE_IMAGE = "envctl-swarmtest/node:1"
SSH_NODE_IMAGE = "envctl-swarmtest/ssh-node:2"  # the node image with sshd and Python: a machine Ansible configures
BARE_SSH_NODE_IMAGE = "envctl-swarmtest/ssh-bare:1"  # sshd and Python, no Docker: a machine Ansible installs it on
REGISTRY_IMAGE = "envctl-swarmtest/registry:1"
NETWORK = PREFIX + "net"
REGISTRY_PORTS = 200  # the push port is the first free one of registry_port .. registry_port + 199
DEFAULT_SUBNET = "172.31.250.0/24"
ENGINE_PORT = 2375

# Exactly the flags a nested engine needs here (no --privileged on this machine).
NODE_RUN_FLAGS = [
    "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
    "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
    "--security-opt", "systempaths=unconfined",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "-v", "/var/lib/docker",
]

_NODE_ENTRYPOINT = r"""#!/bin/sh
# Start dockerd inside a node container. INSECURE_REGISTRIES: space separated host:port list.
# --tls=false: without it dockerd 20.10.24 sleeps 15 s at startup ("Binding to an IP address without --tlsverify is deprecated").
set -eu
# A killed container keeps its rootfs: drop the pid files and sockets of the previous boot.
find /run /var/run -name '*.pid' \( -path '*docker*' -o -path '*containerd*' \) -delete 2>/dev/null || :
rm -f /var/run/docker.sock /var/run/docker.pid
# Nest the inner containers' cgroups under this container's own cgroup (host cgroup v1 tree is bind-mounted):
# `docker pause`/limits of the node then cover its tasks, and removing the node removes them.
if [ -z "${DOCKERD_CGROUP_PARENT:-}" ]; then
  own=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
  case "$own" in ""|/) ;; *) DOCKERD_CGROUP_PARENT="$own/inner" ;; esac
fi
set -- --storage-driver overlay2 \
       -H unix:///var/run/docker.sock -H tcp://0.0.0.0:2375 --tls=false \
       ${DOCKERD_CGROUP_PARENT:+--cgroup-parent "$DOCKERD_CGROUP_PARENT"} "$@"
for r in ${INSECURE_REGISTRIES:-}; do set -- "$@" --insecure-registry "$r"; done
exec dockerd "$@" >>/var/log/dockerd.log 2>&1
"""

_NODE_DOCKERFILE = """FROM debian:bookworm-slim
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      docker.io iproute2 procps ca-certificates iptables \\
 && rm -rf /var/lib/apt/lists/*
COPY entrypoint.sh /usr/local/bin/swarmtest-dockerd
RUN chmod 0755 /usr/local/bin/swarmtest-dockerd
ENV INSECURE_REGISTRIES=172.31.250.2:5000
VOLUME /var/lib/docker
EXPOSE 2375 2377 7946 4789/udp
LABEL envctl.test=swarmlab
ENTRYPOINT ["/usr/local/bin/swarmtest-dockerd"]
"""

_REGISTRY_CONFIG = """version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: /var/lib/docker-registry
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: :5000
"""

_REGISTRY_DOCKERFILE = """FROM debian:bookworm-slim
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker-registry ca-certificates \\
 && rm -rf /var/lib/apt/lists/*
COPY config.yml /etc/docker/registry/config.yml
VOLUME /var/lib/docker-registry
EXPOSE 5000
LABEL envctl.test=swarmlab
ENTRYPOINT ["/usr/bin/docker-registry", "serve", "/etc/docker/registry/config.yml"]
"""


class SwarmLabError(RuntimeError):
    pass


_LAB_NAME = re.compile(r"^[a-z][a-z0-9]{0,19}$")


def lab_prefix(name: str = "") -> str:
    """What the lab ``name`` names its containers, network and cgroups with (``envctl-swarmtest-[<name>-]``)."""
    if name and not _LAB_NAME.match(name):
        raise ValueError(f"lab name {name!r}: give 1-20 lower-case letters and digits, starting with a letter")
    return PREFIX + (f"{name}-" if name else "")


def lab_label(name: str = "") -> str:
    """The ``envctl.test`` label the lab ``name`` puts on what it makes (``swarmlab[-<name>]``)."""
    lab_prefix(name)
    return f"{LABEL_KEY}={LABEL_VALUE}" + (f"-{name}" if name else "")


def _owned(prefix: str, thing: str) -> bool:
    """Whether ``thing`` (a container, network or cgroup name) is the lab's of ``prefix``: its prefix and no
    further ``-`` (``envctl-swarmtest-node1`` is the default lab's, ``envctl-swarmtest-bench-node1`` is bench's)."""
    thing = thing.lstrip("/")
    return thing.startswith(prefix) and "-" not in thing[len(prefix):]


def log(msg: str) -> None:
    print(f"[swarmlab {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(args: Sequence[str], *, host: str | None = None, timeout: float = 120, check: bool = True,
       input: str | None = None, quiet_args: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the docker CLI (against ``host`` when given) with a hard timeout; raise SwarmLabError on failure.

    ``quiet_args`` keeps the arguments out of error messages (join tokens)."""
    cmd = ["docker"] + (["-H", host] if host else []) + list(args)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    except subprocess.TimeoutExpired:
        shown = cmd[:4] if quiet_args else cmd
        raise SwarmLabError(f"timed out after {timeout}s: {' '.join(shown)}") from None
    if check and proc.returncode != 0:
        shown = cmd[:4] if quiet_args else cmd
        raise SwarmLabError(f"{' '.join(shown)} -> exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-800:]}")
    return proc


def image_exists(tag: str) -> bool:
    return sh(["image", "inspect", tag], check=False, timeout=30).returncode == 0


def _build(tag: str, files: dict[str, str], force: bool) -> str:
    if not force and image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix=PREFIX) as ctx:
        for name, text in files.items():
            Path(ctx, name).write_text(text)
        t0 = time.monotonic()
        log(f"building {tag} ...")
        proc = subprocess.run(["docker", "build", "-t", tag, ctx], capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise SwarmLabError(f"docker build {tag} failed: {(proc.stderr or proc.stdout)[-2000:]}")
        log(f"built {tag} in {time.monotonic() - t0:.1f}s")
    return tag


def build_node_image(force: bool = False) -> str:
    """Build ``envctl-swarmtest/node:1`` (Debian bookworm + docker.io 20.10) unless present."""
    return _build(NODE_IMAGE, {"Dockerfile": _NODE_DOCKERFILE, "entrypoint.sh": _NODE_ENTRYPOINT}, force)


_SSH_NODE_ENTRYPOINT = r"""#!/bin/sh
# A machine for 'envctl cloud up --inventory' (PID 1 is tini: it reaps what the init scripts leave behind).
# sshd (root, the key in AUTHORIZED_KEY), and the services enabled for runlevel 2 started the Debian way, as a
# sysvinit machine boots: 'service docker start' runs Debian's /etc/init.d/docker (start-stop-daemon), which reads
# /etc/default/docker. So 'service docker restart' (what Ansible's service module runs on a machine without
# systemd) restarts the engine, and a machine without docker.io gets one from 'apt-get install docker.io'.
# DAEMON_JSON: the engine's /etc/docker/daemon.json at the first boot (none when empty).
set -eu
mkdir -p /root/.ssh /run/sshd && chmod 700 /root/.ssh
printf '%s\n' "${AUTHORIZED_KEY:?set AUTHORIZED_KEY}" > /root/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys
ssh-keygen -A >/dev/null
# A killed container keeps its rootfs: drop the pid files and sockets of the previous boot.
find /run /var/run -name '*.pid' \( -path '*docker*' -o -path '*containerd*' \) -delete 2>/dev/null || :
rm -f /var/run/docker.sock
# The engine's flags (the node image's, see swarmtest-dockerd; no --insecure-registry: a registry is trusted through
# daemon.json, and dockerd refuses one setting given both ways). Inner containers' cgroups nest under this one's.
own=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
case "$own" in ""|/) parent="" ;; *) parent="--cgroup-parent $own/inner" ;; esac
cat > /etc/default/docker <<EOF
# Written by tests/swarmlab.py at every boot of this node (sourced by /etc/init.d/docker).
DOCKER_OPTS="--storage-driver overlay2 -H unix:///var/run/docker.sock -H tcp://0.0.0.0:2375 --tls=false $parent"
# A container may not raise its limits (no CAP_SYS_RESOURCE): the init script's 'ulimit -n 1048576' keeps them.
ulimit() { command ulimit "\$@" 2>/dev/null || :; }
EOF
if [ -n "${DAEMON_JSON:-}" ] && [ ! -e /etc/docker/daemon.json ]; then
  mkdir -p /etc/docker && printf '%s\n' "$DAEMON_JSON" > /etc/docker/daemon.json
fi
/usr/sbin/sshd -e
for svc in docker docker-registry; do
  if ls /etc/rc2.d/S??"$svc" >/dev/null 2>&1; then service "$svc" start || echo "$svc did not start" >&2; fi
done
exec sleep infinity
"""

# What makes a container a machine Ansible configures: sshd, Python (python3-apt: the apt module), tini as PID 1.
# /etc/fstab names the cgroup tree (bind-mounted from the host by NODE_RUN_FLAGS): Debian's docker and
# cgroupfs-mount init scripts then leave /sys/fs/cgroup alone (they would mount the host's missing hierarchies).
_SSH_NODE_LAYER = """RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      openssh-server python3 python3-apt tini iproute2 procps ca-certificates \\
 && rm -rf /var/lib/apt/lists/* \\
 && printf 'PasswordAuthentication no\\nPermitRootLogin prohibit-password\\nUseDNS no\\n' \\
      > /etc/ssh/sshd_config.d/envctl-test.conf \\
 && echo '/sys/fs/cgroup /sys/fs/cgroup none bind 0 0' >> /etc/fstab
COPY ssh-entrypoint.sh /usr/local/bin/swarmtest-ssh-node
RUN chmod 0755 /usr/local/bin/swarmtest-ssh-node
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/swarmtest-ssh-node"]
"""

_SSH_NODE_DOCKERFILE = f"FROM {NODE_IMAGE}\n" + _SSH_NODE_LAYER
# No Docker engine: what 'envctl cloud up' installs docker.io on (LABEL: the lab's cleanup finds its containers).
# A minimal server's apt, without recommends: docker.io's own 12 packages, not 81 (git, perl, systemd, ...: a minute
# more of dpkg on this shared machine).
_BARE_SSH_NODE_DOCKERFILE = ("FROM debian:bookworm-slim\nLABEL envctl.test=swarmlab\n"
                             "EXPOSE 22 2375 2377 7946 4789/udp\n"
                             "RUN echo 'APT::Install-Recommends \"false\";' > /etc/apt/apt.conf.d/90no-recommends\n"
                             + _SSH_NODE_LAYER)


def build_ssh_node_image(force: bool = False) -> str:
    """Build ``envctl-swarmtest/ssh-node:2`` (the node image plus sshd and Python, for Ansible) unless present."""
    build_node_image()
    return _build(SSH_NODE_IMAGE, {"Dockerfile": _SSH_NODE_DOCKERFILE, "ssh-entrypoint.sh": _SSH_NODE_ENTRYPOINT}, force)


def build_bare_ssh_node_image(force: bool = False) -> str:
    """Build ``envctl-swarmtest/ssh-bare:1`` (Debian, sshd and Python: a machine without Docker) unless present."""
    return _build(BARE_SSH_NODE_IMAGE, {"Dockerfile": _BARE_SSH_NODE_DOCKERFILE,
                                        "ssh-entrypoint.sh": _SSH_NODE_ENTRYPOINT}, force)


def build_registry_image(force: bool = False) -> str:
    """Build ``envctl-swarmtest/registry:1`` (Debian's docker-registry, :5000, deletes on) unless present."""
    return _build(REGISTRY_IMAGE, {"Dockerfile": _REGISTRY_DOCKERFILE, "config.yml": _REGISTRY_CONFIG}, force)


def _free_port(preferred: int) -> int:
    for port in range(preferred, preferred + REGISTRY_PORTS):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise SwarmLabError("no free port for the registry")


def _subnets_in_use(own: str = NETWORK) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    ids = sh(["network", "ls", "-q"]).stdout.split()
    if not ids:
        return []
    out = []
    for net in json.loads(sh(["network", "inspect"] + ids).stdout):
        if net.get("Name") == own:
            continue
        for cfg in (net.get("IPAM") or {}).get("Config") or []:
            try:
                out.append(ipaddress.ip_network(cfg.get("Subnet", ""), strict=False))
            except ValueError:
                pass
    return out


def wait_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = pred()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - polled; reported on timeout
            last_exc = exc
        time.sleep(interval)
    raise SwarmLabError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc})" if last_exc else ""))


def http_get(url: str, timeout: float = 3) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode("utf-8", "replace")


class SwarmLab:
    """A swarm of ``nodes`` Docker-in-container engines (first ``managers`` are managers) + a registry.

    Attributes after ``up()``: ``manager_host`` ("tcp://IP:2375"), ``node_hosts`` {hostname: host URL},
    ``node_ips`` {hostname: IP}, ``registry`` (what nodes pull from, "IP:5000"), ``registry_push``
    ("127.0.0.1:PORT", what the host engine pushes to), ``timings`` {step: seconds}.
    """

    def __init__(self, nodes: int = 3, managers: int = 1, subnet: str = DEFAULT_SUBNET,
                 registry_port: int = 15000, boot_timeout: float = 120, verbose: bool = True,
                 ssh_key: str | None = None, form_swarm: bool = True, name: str = "",
                 no_engine: Sequence[str] = (), daemon_json: dict[str, dict[str, Any]] | None = None) -> None:
        if not 1 <= managers <= nodes:
            raise ValueError("need 1 <= managers <= nodes")
        if (no_engine or daemon_json) and not ssh_key:
            raise ValueError("no_engine and daemon_json are for machines Ansible configures: give ssh_key")
        if no_engine and form_swarm:
            raise ValueError("a node without an engine joins no swarm: give form_swarm=False with no_engine")
        self.name = name
        self.prefix = lab_prefix(name)  # "envctl-swarmtest-" (default) or "envctl-swarmtest-<name>-"
        self.label = lab_label(name)  # "envctl.test=swarmlab" (default) or "envctl.test=swarmlab-<name>"
        self.network = self.prefix + "net"
        self.REGISTRY_CONTAINER = self.prefix + "registry"
        self.n_nodes, self.n_managers = nodes, managers
        self.subnet = ipaddress.ip_network(subnet)
        hosts = list(self.subnet.hosts())
        self.gateway = str(hosts[0])
        self.registry_ip = str(hosts[1])
        self.node_ips = {f"node{k}": str(hosts[9 + k]) for k in range(1, nodes + 1)}
        self.node_hosts = {h: f"tcp://{ip}:{ENGINE_PORT}" for h, ip in self.node_ips.items()}
        self.manager_host = self.node_hosts["node1"]
        self.registry = f"{self.registry_ip}:5000"
        self._registry_port_wanted = registry_port
        self.registry_push = ""
        self.boot_timeout = boot_timeout
        self.verbose = verbose
        self.ssh_key = ssh_key  # a public key: the nodes run sshd (root) and are machines for Ansible
        self.form_swarm = form_swarm  # False: engines only (what 'envctl cloud up' joins into a swarm)
        # SSH nodes only: machines without Docker (BARE_SSH_NODE_IMAGE: the play installs docker.io), and the
        # /etc/docker/daemon.json a node's engine starts with (none by default: an SSH node trusts no registry).
        self.no_engine = set(no_engine)
        self.daemon_json = dict(daemon_json or {})
        wrong = sorted(((self.no_engine | set(self.daemon_json)) - set(self.node_ips))
                       | (self.no_engine & set(self.daemon_json)))
        if wrong:
            raise ValueError(f"no_engine/daemon_json name {wrong}: give nodes of this lab (node1..node{nodes}), "
                             "and no daemon.json for a node without an engine")
        self.timings: dict[str, float] = {}

    # ---- naming ---------------------------------------------------------------------------------------
    def container_name(self, hostname: str) -> str:
        return self.prefix + hostname

    REGISTRY_CONTAINER = PREFIX + "registry"  # the default lab's; an instance's own is set in __init__

    def _log(self, msg: str) -> None:
        if self.verbose:
            log(msg)

    # ---- context manager ------------------------------------------------------------------------------
    def __enter__(self) -> "SwarmLab":
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ---- lifecycle ------------------------------------------------------------------------------------
    def leftovers(self) -> dict[str, list[str]]:
        """What :meth:`cleanup_leftovers` removes, found, nothing touched: containers (ids), networks, volumes,
        push tags and cgroup directories carrying this lab's label or name (never another lab's: see "Side by
        side" in the module's docstring)."""
        ids = sh(["ps", "-aq", "--filter", f"label={self.label}"]).stdout.split()
        listed = sh(["ps", "-a", "--filter", f"name=^{self.prefix}",
                     "--format", '{{.ID}} {{.Names}} {{.Label "' + LABEL_KEY + '"}}']).stdout.splitlines()
        mine = self.label.split("=", 1)[1]  # a container of another named lab carries swarmlab-<other>
        for row in listed:
            cid, cname, value = (row.split(None, 2) + ["", ""])[:3]
            if _owned(self.prefix, cname) and (value == mine or not value.startswith(LABEL_VALUE + "-")):
                ids.append(cid)
        nets = [self.network] if sh(["network", "inspect", self.network], check=False, timeout=30).returncode == 0 else []
        vols = sh(["volume", "ls", "-q", "--filter", f"label={self.label}"]).stdout.split()
        # Push tags of a run killed between `docker tag` and its untag (127.0.0.1:<registry_port .. +199>/...).
        lo = self._registry_port_wanted
        tags = sh(["images", "--format", "{{.Repository}}:{{.Tag}}"]).stdout.split()
        stale = [t for t in tags if t.startswith("127.0.0.1:") and t.split("/")[0].split(":")[1].isdigit()
                 and lo <= int(t.split("/")[0].split(":")[1]) < lo + REGISTRY_PORTS]
        # Empty cgroups an engine left at the top of the host tree (DOCKERD_CGROUP_PARENT=/envctl-swarmtest-*).
        cgroups = [str(t) for t in Path("/sys/fs/cgroup").glob(f"*/{self.prefix}*") if _owned(self.prefix, t.name)]
        return {"containers": sorted(set(ids)), "networks": nets, "volumes": vols, "tags": stale, "cgroups": cgroups}

    def cleanup_leftovers(self) -> None:
        """Remove every container/network/volume/push tag/cgroup a previous (possibly killed) run of this lab left
        behind (:meth:`leftovers`)."""
        found = self.leftovers()
        if found["containers"]:
            sh(["rm", "-f", "-v"] + found["containers"], timeout=180, check=False)
        for net in found["networks"]:
            sh(["network", "rm", net], timeout=60)
        if found["volumes"]:
            sh(["volume", "rm", "-f"] + found["volumes"], check=False)
        if found["tags"]:
            sh(["rmi"] + found["tags"], check=False, timeout=120)
        for top in map(Path, found["cgroups"]):
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [top]:
                try:
                    d.rmdir()
                except OSError:
                    pass

    def up(self) -> "SwarmLab":
        t_all = time.monotonic()
        self.cleanup_leftovers()
        t = time.monotonic()
        build_node_image()
        if self.ssh_key:
            build_ssh_node_image()
        if self.no_engine:
            build_bare_ssh_node_image()
        build_registry_image()
        self.timings["images"] = time.monotonic() - t
        for other in _subnets_in_use(self.network):
            if other.overlaps(self.subnet):
                raise SwarmLabError(f"subnet {self.subnet} overlaps an existing network ({other})")
        sh(["network", "create", "--driver", "bridge", "--subnet", str(self.subnet), "--gateway", self.gateway,
            "--label", self.label, self.network])

        t = time.monotonic()
        self.registry_push = f"127.0.0.1:{_free_port(self._registry_port_wanted)}"
        sh(["run", "-d", "--name", self.REGISTRY_CONTAINER, "--hostname", "registry", "--label", self.label,
            "--network", self.network, "--ip", self.registry_ip, "-p", f"{self.registry_push}:5000",
            "-v", "/var/lib/docker-registry", REGISTRY_IMAGE])
        for hostname, ip in self.node_ips.items():
            if not self.ssh_key:
                env, image = ["-e", f"INSECURE_REGISTRIES={self.registry}"], NODE_IMAGE
            else:  # an SSH node trusts registries through its daemon.json only (see _SSH_NODE_ENTRYPOINT)
                env = ["-e", f"AUTHORIZED_KEY={self.ssh_key}"]
                if hostname in self.daemon_json:
                    env += ["-e", f"DAEMON_JSON={json.dumps(self.daemon_json[hostname])}"]
                image = BARE_SSH_NODE_IMAGE if hostname in self.no_engine else SSH_NODE_IMAGE
            sh(["run", "-d", "--name", self.container_name(hostname), "--hostname", hostname,
                "--label", self.label, "--label", f"envctl.swarmtest.node={hostname}",
                "--network", self.network, "--ip", ip, *env, *NODE_RUN_FLAGS, image])
        wait_until(lambda: http_get(f"http://{self.registry_push}/v2/") is not None, 60, "the registry")
        for hostname in self.node_ips:
            if self.ssh_key:
                self.wait_ssh(hostname)
            if hostname not in self.no_engine:
                self.wait_engine(hostname)
        self.timings["engines_up"] = time.monotonic() - t

        if not self.form_swarm:
            self.timings["up_total"] = time.monotonic() - t_all
            return self
        t = time.monotonic()
        mgr_ip = self.node_ips["node1"]
        sh(["swarm", "init", "--advertise-addr", mgr_ip, "--listen-addr", f"{mgr_ip}:2377"], host=self.manager_host)
        tokens = {role: sh(["swarm", "join-token", "-q", role], host=self.manager_host).stdout.strip()
                  for role in ("manager", "worker")}
        for k, (hostname, ip) in enumerate(self.node_ips.items(), start=1):
            if hostname == "node1":
                continue
            role = "manager" if k <= self.n_managers else "worker"
            sh(["swarm", "join", "--token", tokens[role], "--advertise-addr", ip, "--listen-addr", f"{ip}:2377",
                f"{mgr_ip}:2377"], host=self.node_hosts[hostname], quiet_args=True, timeout=90)
        for hostname in self.node_ips:
            sh(["node", "update", "--label-add", f"envctl.node={hostname}", hostname], host=self.manager_host)
        wait_until(lambda: all(s == "ready" for s in self.node_states().values())
                   and len(self.node_states()) == self.n_nodes, 60, "all nodes ready")
        self.timings["swarm_formed"] = time.monotonic() - t
        self.timings["up_total"] = time.monotonic() - t_all
        self._log(f"swarm up: {self.node_ips} registry={self.registry} push={self.registry_push} "
                  + " ".join(f"{k}={v:.1f}s" for k, v in self.timings.items()))
        return self

    def down(self) -> None:
        """Remove the nodes (and everything inside them), the registry and the network."""
        t = time.monotonic()
        self.cleanup_leftovers()
        self.timings["down"] = time.monotonic() - t
        self._log(f"torn down in {self.timings['down']:.1f}s")

    # ---- engines --------------------------------------------------------------------------------------
    def ping(self, hostname: str, timeout: float = 2) -> bool:
        try:
            return http_get(f"http://{self.node_ips[hostname]}:{ENGINE_PORT}/_ping", timeout=timeout) == "OK"
        except OSError:
            return False

    def wait_ssh(self, hostname: str, timeout: float | None = None) -> float:
        """Wait until the SSH node's sshd accepts connections (port 22)."""
        def open_() -> bool:
            with socket.create_connection((self.node_ips[hostname], 22), timeout=2):
                return True
        t = time.monotonic()
        wait_until(open_, timeout or self.boot_timeout, f"sshd of {hostname}", interval=0.3)
        return time.monotonic() - t

    def wait_engine(self, hostname: str, timeout: float | None = None) -> float:
        t = time.monotonic()
        wait_until(lambda: self.ping(hostname), timeout or self.boot_timeout, f"engine of {hostname}",
                   interval=0.3)
        return time.monotonic() - t

    def docker(self, *args: str, node: str | None = None, timeout: float = 120,
               check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against the manager (default) or ``node``'s engine."""
        return sh(list(args), host=self.node_hosts[node] if node else self.manager_host, timeout=timeout, check=check)

    def client(self, node: str | None = None):
        """A python_on_whales DockerClient for the manager (default) or ``node``'s engine."""
        from python_on_whales import DockerClient
        return DockerClient(host=self.node_hosts[node] if node else self.manager_host)

    def node_states(self) -> dict[str, str]:
        """{hostname: Status.State} as the manager sees it (ready/down/unknown/disconnected)."""
        out = self.docker("node", "ls", "--format", "{{.Hostname}} {{.Status}}", timeout=20).stdout
        return {h: s.lower() for h, s in (line.split(None, 1) for line in out.splitlines() if line.strip())}

    def kill_node(self, hostname: str) -> None:
        """``docker kill`` the node's container: a lost node (no goodbye to the swarm)."""
        sh(["kill", self.container_name(hostname)], timeout=60)

    def start_node(self, hostname: str, wait: bool = True) -> float:
        """Start a killed/stopped node container again; returns seconds until its engine answers."""
        t = time.monotonic()
        sh(["start", self.container_name(hostname)], timeout=60)
        if wait and hostname not in self.no_engine:
            self.wait_engine(hostname)
        return time.monotonic() - t

    def pause_node(self, hostname: str) -> None:
        sh(["pause", self.container_name(hostname)])

    def unpause_node(self, hostname: str) -> None:
        sh(["unpause", self.container_name(hostname)])

    def wait_node_state(self, hostname: str, state: str, timeout: float = 120, interval: float = 1) -> float:
        t = time.monotonic()
        wait_until(lambda: self.node_states().get(hostname) == state, timeout, f"{hostname} {state}", interval)
        return time.monotonic() - t

    # ---- images ---------------------------------------------------------------------------------------
    def push(self, local_image: str, name: str | None = None) -> str:
        """Push a host-engine image to the registry; return the reference the nodes pull (``registry/name``)."""
        first = local_image.split("/")[0]
        has_registry = "/" in local_image and ("." in first or ":" in first or first == "localhost")
        name = name or (local_image.split("/", 1)[1] if has_registry else local_image)
        if ":" not in name.rsplit("/", 1)[-1]:
            name += ":latest"
        push_ref = f"{self.registry_push}/{name}"
        sh(["tag", local_image, push_ref])
        try:
            sh(["push", push_ref], timeout=900)
        finally:
            sh(["rmi", push_ref], check=False, timeout=60)  # only the tag: layers stay with local_image
        return f"{self.registry}/{name}"

    # ---- services and tasks ---------------------------------------------------------------------------
    def node_hostname(self, node_id: str) -> str:
        return self.docker("node", "inspect", "-f", "{{.Description.Hostname}}", node_id, timeout=20).stdout.strip()

    def tasks(self, service: str, running_only: bool = True) -> list[dict[str, Any]]:
        """Task objects (``docker inspect`` JSON) of a service as the manager reports them."""
        args = ["service", "ps", "-q", "--no-trunc"] + (["--filter", "desired-state=running"] if running_only else [])
        ids = self.docker(*args, service, timeout=30).stdout.split()
        return json.loads(self.docker("inspect", *ids, timeout=30).stdout) if ids else []

    def task_container(self, service: str, timeout: float = 120) -> tuple[str, str]:
        """(node hostname, container id) of the service's first running task, waiting until it runs."""
        def find():
            for task in self.tasks(service):
                cid = ((task.get("Status") or {}).get("ContainerStatus") or {}).get("ContainerID")
                if task["Status"]["State"] == "running" and cid:
                    return self.node_hostname(task["NodeID"]), cid
            return None
        return wait_until(find, timeout, f"a running task of {service}")

    def task_ips(self, service: str) -> dict[str, list[str]]:
        """{network name: [IP, ...]} of the service's running tasks (from NetworksAttachments)."""
        out: dict[str, list[str]] = {}
        for task in self.tasks(service):
            for att in task.get("NetworksAttachments") or []:
                name = att["Network"]["Spec"]["Name"]
                out.setdefault(name, []).extend(a.split("/")[0] for a in att.get("Addresses") or [])
        return out

    def exec(self, service: str, command: Sequence[str], timeout: float = 60) -> str:
        """Run a command in the service's task container through the engine of the node it runs on."""
        hostname, cid = self.task_container(service)
        return sh(["exec", cid, *command], host=self.node_hosts[hostname], timeout=timeout).stdout


# ---- demo -------------------------------------------------------------------------------------------------
def _demo(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="A throwaway swarm: up, push, a service, HTTP, exec, down (timings).")
    ap.add_argument("--name", default="", help="a lab of its own (envctl-swarmtest-NAME-*) [the default lab]")
    ap.add_argument("--subnet", default=DEFAULT_SUBNET, help="its bridge network [%(default)s]")
    ap.add_argument("--registry-port", type=int, default=15000, help="first host port tried for pushes [%(default)s]")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    with SwarmLab(name=args.name, subnet=args.subnet, registry_port=args.registry_port) as lab:
        print(f"up: {json.dumps({k: round(v, 1) for k, v in lab.timings.items()})}")
        print(lab.docker("node", "ls").stdout)
        base = "envctl-mini/base:1" if image_exists("envctl-mini/base:1") else None
        if base is None:
            print("envctl-mini/base:1 missing: demo stops after forming the swarm")
            return
        t = time.monotonic()
        ref = lab.push(base, "swarmtest/pyhttp:1")
        print(f"push {base} -> {ref}: {time.monotonic() - t:.1f}s")
        lab.docker("network", "create", "-d", "overlay", "--attachable", "--label", lab.label, "demo-net")
        t = time.monotonic()
        lab.docker("service", "create", "-d", "--name", "web", "--endpoint-mode", "dnsrr", "--network", "demo-net",
                   "--constraint", "node.hostname==node2", "--publish", "mode=host,target=80,published=8080",
                   ref, "python3", "-m", "http.server", "80")
        url = f"http://{lab.node_ips['node2']}:8080/"
        wait_until(lambda: http_get(url), 180, url)
        print(f"service create -> {url} answers: {time.monotonic() - t:.1f}s")
        t = time.monotonic()
        out = lab.exec("web", ["python3", "-c", "import socket; print(socket.gethostname())"])
        print(f"exec in task via node engine: {out.strip()!r} {time.monotonic() - t:.2f}s")
        print(f"task IPs: {lab.task_ips('web')}")
    print(f"demo total {time.monotonic() - t0:.1f}s")


if __name__ == "__main__":
    _demo()
