"""One validation layer for user input that ends up in file names, URLs, ports, argv or firewalls.

Every validator takes the raw value (what the user typed) and ``what`` (how to name it in the
message, e.g. ``"--lab"``), and returns the normalised value or raises :class:`UsageError` with
one line saying what is wrong and how to fix it. They never touch the file system, so call them
*before* anything is written or removed:

- :func:`validate_name` / :func:`validate_lab_name` / :func:`validate_instance_name`: names that
  become file names, container labels and pid files (no path separators, no ``..``);
- :func:`validate_port`, :func:`validate_port_offset`: TCP ports and instance port offsets;
- :func:`validate_host`: ``--bind`` / ``--public-host`` values (an IP address or a DNS host name);
- :func:`validate_duration`: ``8h``, ``30m``, ``90s``, ``2d``;
- :func:`validate_cidr`, :func:`validate_allowed_cidrs`: firewall sources, refusing the whole
  internet (also when several CIDRs add up to it) unless explicitly allowed;
- :func:`validate_token`: reset-server tokens (URL-safe, long enough to guess-proof).
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from envctl.errors import UsageError

# The reset tiers' words, as the CLI offers them before anything heavier is imported ('envctl reset --tier', its
# --help). The catalog's ``Tier`` literal and the tier registry (envctl.state.tiers.TIERS) name the same words, in
# this order: tests/test_architecture.py checks the three agree.
TIER_WORDS = ("spare", "inplace", "endpoint", "recreate", "none")

NAME_MAX = 40
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_DURATION = re.compile(r"([0-9]{1,7})([smhd]?)")  # ASCII digits: \d also matches e.g. Arabic-Indic ones
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_TOKEN = re.compile(r"[A-Za-z0-9_-]+")
TOKEN_MIN, TOKEN_MAX = 16, 256
PORT_OFFSET_MAX = 60000

_WORLD_V4 = ipaddress.IPv4Network("0.0.0.0/0")
_WORLD_V6 = ipaddress.ip_network("::/0")


def _show(value: object) -> str:
    text = str(value)
    return repr(text[:60] + ("…" if len(text) > 60 else ""))


def validate_name(value: str, what: str = "name") -> str:
    """A name used in file names and labels: 1-40 ASCII letters, digits, '-' or '_', starting with
    a letter or digit (so it is never read as an option). No '/', '\\', '.', '..' or spaces."""
    if not isinstance(value, str) or not value:
        raise UsageError(f"{what} is empty", f"give {what} as 1-{NAME_MAX} letters, digits, '-' or '_'")
    if len(value) > NAME_MAX:
        raise UsageError(f"{what} {_show(value)} is {len(value)} characters long (at most {NAME_MAX})",
                         f"use a shorter {what}")
    if not _NAME.fullmatch(value) or not value.isascii():
        raise UsageError(f"invalid {what} {_show(value)}",
                         f"use 1-{NAME_MAX} ASCII letters, digits, '-' or '_', starting with a letter or digit")
    return value


def validate_lab_name(value: str) -> str:
    """A cloud lab name (becomes ``labs/<lab>.json``, key and known_hosts file names, AWS tags)."""
    return validate_name(value, "lab name")


def validate_instance_name(value: str) -> str:
    """An instance name (becomes Docker labels, network names, lock/pid/record file names)."""
    return validate_name(value, "instance name")


def _int(value: object, what: str) -> int:
    if isinstance(value, bool):
        raise UsageError(f"invalid {what} {_show(value)}", f"give {what} as a whole number")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not re.fullmatch(r"[0-9]{1,7}", text):
        raise UsageError(f"invalid {what} {_show(value)}", f"give {what} as a whole number")
    return int(text)


def validate_port(value: int | str, what: str = "port") -> int:
    """A TCP port, 1-65535."""
    port = _int(value, what)
    if not 1 <= port <= 65535:
        raise UsageError(f"{what} {port} is out of range", "use a port between 1 and 65535")
    return port


def validate_port_offset(value: int | str, ports: Iterable[int] = (), what: str = "--port-offset") -> int:
    """An instance's port offset, 0-60000, such that every ``port + offset`` is still a valid port."""
    offset = _int(value, what)
    if not 0 <= offset <= PORT_OFFSET_MAX:
        raise UsageError(f"{what} {offset} is out of range", f"use an offset between 0 and {PORT_OFFSET_MAX}")
    too_high = sorted(p for p in ports if not 1 <= p + offset <= 65535)
    if too_high:
        raise UsageError(f"{what} {offset} moves port {too_high[-1]} to {too_high[-1] + offset}, above 65535",
                         f"use an offset of at most {65535 - max(too_high)}")
    return offset


def validate_host(value: str, what: str = "host") -> str:
    """An IP address (v4 or v6, without brackets) or a DNS host name, for ``--bind`` and
    ``--public-host``. No scheme, port, path, quotes or spaces: it is pasted into URLs and argv."""
    if not isinstance(value, str) or not value:
        raise UsageError(f"{what} is empty", "give an IP address or a host name, e.g. 127.0.0.1 or lab.example.org")
    hint = "give a bare IP address or host name, e.g. 0.0.0.0, 10.0.0.5 or lab.example.org (no http://, port or path)"
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    name = value[:-1] if value.endswith(".") else value
    if len(name) > 253 or not name.isascii() or not all(_LABEL.fullmatch(p) for p in name.split(".")):
        raise UsageError(f"invalid {what} {_show(value)}", hint)
    if re.fullmatch(r"[\d.]+", name):  # looks like an IPv4 address but is not one (e.g. 300.1.1.1)
        raise UsageError(f"invalid {what} {_show(value)} (not a valid IPv4 address)", hint)
    return value


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost`` (not for 0.0.0.0 or ``""``, which mean every address)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def validate_duration(value: str, what: str = "duration", *, minimum: int = 1, maximum: int | None = None) -> int:
    """``90``/``90s``, ``30m``, ``8h``, ``2d`` -> seconds, between ``minimum`` and ``maximum``."""
    m = _DURATION.fullmatch(str(value).strip().lower())
    if not m:
        raise UsageError(f"invalid {what} {_show(value)}", "use a whole number with a unit, e.g. 90s, 30m, 8h or 2d")
    seconds = int(m.group(1)) * _UNITS[m.group(2)]
    if seconds < minimum or (maximum is not None and seconds > maximum):
        upper = f" and {_human(maximum)}" if maximum is not None else ""
        raise UsageError(f"{what} {value} is out of range", f"use a duration between {_human(minimum)}{upper}")
    return seconds


def _human(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def validate_cidr(value: str, what: str = "--allow-cidr") -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A CIDR (``203.0.113.7/32``, ``2001:db8::/48``; a bare address means a single host)."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise UsageError(f"invalid CIDR {_show(value)} for {what}", "use the form 203.0.113.7/32")
    try:
        return ipaddress.ip_network(value, strict=False)
    except ValueError as exc:
        raise UsageError(f"invalid CIDR {_show(value)} for {what}", "use the form 203.0.113.7/32") from exc


def opens_world(cidrs: Sequence[str]) -> list[str]:
    """Which address families the CIDRs open completely (``["0.0.0.0/0"]``, ``["::/0"]``, both or
    none), also when several CIDRs add up to it (0.0.0.0/1 + 128.0.0.0/1) or when an IPv4-mapped
    IPv6 range (``::ffff:0:0/96``) covers all of IPv4."""
    nets = [validate_cidr(c) for c in cidrs]
    v4: list[ipaddress.IPv4Network] = [n for n in nets if isinstance(n, ipaddress.IPv4Network)]
    v6: list[ipaddress.IPv6Network] = [n for n in nets if isinstance(n, ipaddress.IPv6Network)]
    mapped = ipaddress.IPv6Network("::ffff:0:0/96")
    for n in v6:  # IPv4-mapped addresses reach dual-stack listeners as IPv4
        if n.prefixlen <= 96 and mapped.subnet_of(n):
            v4.append(_WORLD_V4)
        elif n.subnet_of(mapped):
            low = ipaddress.IPv4Address(int(n.network_address) & 0xFFFFFFFF)
            v4.append(ipaddress.IPv4Network(f"{low}/{n.prefixlen - 96}"))
    out = []
    if v4 and _WORLD_V4 in list(ipaddress.collapse_addresses(v4)):
        out.append("0.0.0.0/0")
    if v6 and _WORLD_V6 in list(ipaddress.collapse_addresses(v6)):
        out.append("::/0")
    return out


def validate_allowed_cidrs(cidrs: Sequence[str], *, allow_world: bool = False, what: str = "--allow-cidr") -> list[str]:
    """The firewall sources of a lab: at least one, each valid, and not the whole internet (alone or
    added up) unless ``allow_world``. Returns them normalised (``10.0.0.7/24`` -> ``10.0.0.0/24``)."""
    if not cidrs:
        raise UsageError(f"no {what} given", f"pass the CIDR(s) that may reach the lab, e.g. {what} 203.0.113.7/32")
    nets = [str(validate_cidr(c, what)) for c in cidrs]
    world = opens_world(nets)
    if world and not allow_world:
        given = ", ".join(cidrs)
        raise UsageError(
            f"refusing to open the lab to the whole internet ({given} covers {' and '.join(world)})",
            f"name your own CIDR with {what}, or pass --allow-world if you really mean it",
        )
    return nets


def validate_token(value: str, what: str = "--token") -> str:
    """A reset-server token: 16-256 URL-safe characters (letters, digits, '-', '_'), since it is
    carried as a URL path segment. ``secrets.token_urlsafe(32)`` makes one."""
    if not isinstance(value, str) or not _TOKEN.fullmatch(value) or not value.isascii():
        raise UsageError(f"invalid {what}: only letters, digits, '-' and '_' may be used",
                         "generate one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'")
    if not TOKEN_MIN <= len(value) <= TOKEN_MAX:
        raise UsageError(f"{what} must be {TOKEN_MIN}-{TOKEN_MAX} characters long (got {len(value)})",
                         "generate one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return value


__all__ = [
    "NAME_MAX", "PORT_OFFSET_MAX", "is_loopback", "opens_world", "validate_allowed_cidrs", "validate_cidr",
    "validate_duration", "validate_host", "validate_instance_name", "validate_lab_name", "validate_name",
    "validate_port", "validate_port_offset", "validate_token", "validate_site_name", "validate_relative_path",
    "validate_registry_mirror", "validate_image_ref", "validate_ec2_inputs", "ENV_VARS", "EnvVar", "env_value",
    "env_table",
    "env_report", "SITE_NAME_MAX", "PATH_MAX", "validate_region", "validate_memory_size",
]


# host[:port][/path], as Docker writes a registry (no scheme: it is prefixed to image references)
_REGISTRY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?(?:/[a-z0-9._-]+)*")
# name[:tag], Docker's grammar in short: lower-case path components, a tag of word characters
_IMAGE_REF = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
                        r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?")


def validate_registry_mirror(value: str, what: str = "--registry-mirror") -> str:
    """A registry mirror: ``host[:port][/prefix]``, e.g. ``mirror.example.org:5000/dockerhub``."""
    port = re.match(r"[^:/]*:([0-9]+)", value) if isinstance(value, str) else None
    if not isinstance(value, str) or not _REGISTRY.fullmatch(value) or not value.isascii() or (
            port is not None and not 1 <= int(port.group(1)) <= 65535) or any(
            part in (".", "..") for part in value.split("/")[1:]):
        raise UsageError(f"invalid {what} {_show(value)}",
                         "give host[:port][/prefix], e.g. 127.0.0.1:5000 or mirror.example.org/dockerhub (no scheme)")
    return value


def validate_image_ref(value: str, what: str = "image") -> str:
    """An image reference ``name[:tag]`` (e.g. ``shopping_final_0712:latest``)."""
    if not isinstance(value, str) or len(value) > 255 or not _IMAGE_REF.fullmatch(value):
        raise UsageError(f"invalid {what} {_show(value)}", "give an image name with an optional tag, e.g. myimage:1")
    return value


_REGION = re.compile(r"[a-z]{2}(?:-[a-z]+){1,3}-[0-9]{1,2}")


def validate_region(value: str, what: str = "--region") -> str:
    """An AWS region name such as ``us-east-2`` or ``us-gov-west-1``: lower-case letters and
    digits joined by '-', nothing else (it reaches boto3, Ansible variables and file names)."""
    if not isinstance(value, str) or len(value) > 40 or not _REGION.fullmatch(value):
        raise UsageError(f"invalid {what} {_show(value)}", "give an AWS region name such as us-east-2")
    return value


MEMORY_MIN, MEMORY_MAX = 64 << 20, 64 << 40  # 64 MiB .. 64 TiB
_SIZE_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def validate_memory_size(value: str, what: str = "--memory", *, minimum: int = MEMORY_MIN,
                         maximum: int = MEMORY_MAX) -> int:
    """A memory size as Docker writes it (``512m``, ``64g``; binary units k, m, g, t) -> bytes,
    between ``minimum`` and ``maximum`` (0, negative, fractions, inf/nan and words are refused)."""
    text = value.strip().lower() if isinstance(value, str) else ""
    m = re.fullmatch(r"([0-9]{1,12})([kmgt])", text)
    if not m:
        raise UsageError(f"invalid {what} {_show(value)}: not a size", "write it like 64g or 512m")
    size = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
    if not minimum <= size <= maximum:
        raise UsageError(f"{what} {value} is out of range",
                         f"give a size between {minimum >> 20}m and {maximum >> 30}g")
    return size


_INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9]+")
_AMI = re.compile(r"webarena|ubuntu|ami-[0-9a-f]{8,17}")
_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")


def validate_ec2_inputs(instance_type: str, ami: str, key_name: str | None, images_url: str) -> None:
    """``cloud up``'s EC2 values, before any call to AWS or any file is written."""
    if not _INSTANCE_TYPE.fullmatch(instance_type or ""):
        raise UsageError(f"invalid --instance-type {_show(instance_type)}", "give an EC2 type such as t3a.xlarge")
    if not _AMI.fullmatch(ami or ""):
        raise UsageError(f"invalid --ami {_show(ami)}", "give webarena, ubuntu or an AMI id (ami-0123456789abcdef0)")
    if key_name is not None and not _KEY_NAME.fullmatch(key_name):
        raise UsageError(f"invalid --key-name {_show(key_name)}", "give the name of an EC2 key pair (no '/' or spaces)")
    if images_url and not re.fullmatch(r"(https?|s3)://[^\s\"'<>]+", images_url):
        raise UsageError(f"invalid --images-url {_show(images_url)}", "give an http(s):// or s3:// URL")


# -- catalog names and paths -----------------------------------------------------------------------

SITE_NAME_MAX = 40
_SITE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
PATH_MAX = 1024


def validate_site_name(value: str, what: str = "site name") -> str:
    """A catalog site, service or flavor name: a lower-case ASCII letter, then up to 39 lower-case
    letters, digits or '_' (``^[a-z][a-z0-9_]{0,39}$``). These names become container names, Docker
    labels, file names (login state, locks) and template references, so nothing else is allowed."""
    if not isinstance(value, str) or not _SITE_NAME.fullmatch(value) or not value.isascii():
        raise UsageError(f"invalid {what} {_show(value)}",
                         f"use a lower-case letter, then up to {SITE_NAME_MAX - 1} lower-case letters, digits or '_'")
    return value


def validate_relative_path(value: str, what: str = "path", *, under: str = "the data directory") -> str:
    """A path joined onto a directory envctl owns (``under``): non-empty, relative, no ``..``
    component, no NUL or other control character, at most :data:`PATH_MAX` characters, and naming
    something below that directory (not ``.`` itself)."""
    hint = f"give a path relative to {under}, e.g. map/osm_dump"
    if not isinstance(value, str) or not value:
        raise UsageError(f"{what} is empty", hint)
    if "\0" in value:
        raise UsageError(f"{what} {_show(value)} contains a NUL byte", hint)
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UsageError(f"{what} {_show(value)} contains a control character", hint)
    if len(value) > PATH_MAX:
        raise UsageError(f"{what} is {len(value)} characters long (at most {PATH_MAX})", hint)
    if value.startswith(("/", "\\", "~")):
        raise UsageError(f"{what} {_show(value)} is absolute", hint)
    parts = value.replace("\\", "/").split("/")
    if ".." in parts:
        raise UsageError(f"{what} {_show(value)} contains '..'", hint)
    if all(p in ("", ".") for p in parts):
        raise UsageError(f"{what} {_show(value)} names {under} itself", hint)
    return value


# -- environment variables -------------------------------------------------------------------------

def _env_path(value: str, what: str) -> str:
    if "\0" in value or any(ord(c) < 32 for c in value):
        raise UsageError(f"{what} {_show(value)} contains a control character", f"set {what} to a path, or unset it")
    return value


def _env_rate(value: str, what: str) -> float:
    import math

    try:
        rate = float(value.strip())
    except ValueError:
        rate = math.nan
    if not math.isfinite(rate) or rate < 0 or not re.fullmatch(r"[0-9]+(\.[0-9]*)?", value.strip()):
        raise UsageError(f"invalid {what} {_show(value)}",
                         f"set {what} to a number of bytes per second (0 disables the check), or unset it")
    return rate


def _env_bytes(value: str, what: str) -> int:
    if not re.fullmatch(r"[0-9]{1,20}", value.strip()):
        raise UsageError(f"invalid {what} {_show(value)}", f"set {what} to a whole number of bytes, or unset it")
    return int(value.strip())


def _env_url(value: str, what: str) -> str:
    if not re.fullmatch(r"(https?|s3)://[^\s\"'<>]+", value):
        raise UsageError(f"invalid {what} {_show(value)}", f"set {what} to an http(s):// URL, or unset it")
    return value


def _env_text(value: str, what: str) -> str:
    if "\0" in value or "\n" in value or "\r" in value:
        raise UsageError(f"{what} contains a control character", f"set {what} to one line of text, or unset it")
    return value


def _env_registry(value: str, what: str) -> str:
    raw = value.strip().removeprefix("https://").removeprefix("http://").rstrip("/")
    return validate_registry_mirror(raw, what) if raw else raw


@dataclass(frozen=True)
class EnvVar:
    """One environment variable envctl reads: its name, what it means, whether its value is a
    secret (masked by ``envctl doctor``), and the validator of the option it mirrors."""

    name: str
    meaning: str
    check: Callable[[str, str], object] | None = None
    secret: bool = False


# Every variable envctl's own code reads (os.environ / getenv and click's envvar=); the mini images'
# variables are the images' business and not listed. ``tests/test_hostile_catalog.py`` greps the
# package and fails when a read variable is missing here.
BACKENDS = ("local", "swarm")  # what ENVCTL_BACKEND accepts: envctl.backends.KINDS (tests/test_architecture.py)


def _env_backend(value: str, what: str) -> str:
    if value not in BACKENDS:
        raise UsageError(f"{what} {value[:40]!r} is not a backend", f"set it to {' or '.join(BACKENDS)} (or unset it)")
    return value


def _env_seconds(value: str, what: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 1 <= seconds <= 86400:
        raise UsageError(f"{what} {value[:40]!r} is not a number of seconds from 1 to 86400", f"e.g. {what}=120")
    return seconds


ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("ENVCTL_CATALOG", "site catalog YAML instead of the built-in one (like --catalog)", _env_path),
    EnvVar("ENVCTL_INSTANCE", "default instance name (like --instance)", lambda v, w: validate_name(v, w)),
    EnvVar("ENVCTL_DATA_DIR", "data directory: pins, downloads, unpacked data (default $XDG_DATA_HOME/envctl)", _env_path),
    EnvVar("XDG_DATA_HOME", "base of the default data directory (default ~/.local/share)", _env_path),
    EnvVar("HOME", "home directory: '~' in paths and the default ~/.local/share (read through Path.home())", _env_path),
    EnvVar("ENVCTL_STATE_DIR", "state directory: locks, reset-server records and tokens, debug log", _env_path),
    EnvVar("XDG_RUNTIME_DIR", "base of the default state directory (default /tmp)", _env_path),
    EnvVar("ENVCTL_REGISTRY_MIRROR", "pull registry images through this mirror (like --registry-mirror)", _env_registry),
    EnvVar("ENVCTL_MIN_RATE", "tuning: slowest acceptable download rate in bytes/s before a mirror is skipped "
           "(default 65536; 0 disables)", _env_rate),
    EnvVar("ENVCTL_DISK_BUDGET_BYTES", "tuning: cap on the free space every filesystem is assumed to have", _env_bytes),
    EnvVar("ENVCTL_SERVE_TOKEN", "reset-server token (like serve --token)", lambda v, w: validate_token(v, w), secret=True),
    EnvVar("ENVCTL_CHROMIUM", "Chromium executable for login state and smoke (empty: Playwright's own)", _env_path),
    EnvVar("ENVCTL_LEASE_SERVER", "lease server URL for envctl.leases.lease (may carry the token)", _env_url, secret=True),
    EnvVar("ENVCTL_POOL", "lease pool name for envctl.leases.lease (default 'default')", lambda v, w: validate_name(v, w)),
    EnvVar("ENVCTL_BACKEND", "where new instances' copies run: local (default) or swarm", _env_backend),
    EnvVar("ENVCTL_ENGINE_TIMEOUT", "seconds a control call to a Docker engine may take before it is given up "
           "(default 120; image loads, pulls, builds and commits are not bounded by it)", _env_seconds),
    EnvVar("DOCKER_HOST", "the Docker engine (or swarm manager) envctl talks to, as the docker CLI reads it", _env_text),
    EnvVar("ENVCTL_SWARM_REGISTRY", "swarm: the registry every node pulls from, host:port ('envctl cloud env' prints it)",
           _env_registry),
    EnvVar("ENVCTL_SWARM_CONSTRAINT", "swarm: only nodes matching this (node.labels.K==V, node.hostname==H, "
           "node.role==worker; several joined by ',') take instances", _env_text),
    EnvVar("ENVCTL_SWARM_NODE_ENGINE", "swarm: how to reach a node's engine when its envctl.engine label is unset "
           "(default ssh://{addr})", _env_text),
    EnvVar("ENVCTL_AGENT_BASE_URL", "smoke LLM agent: OpenAI-compatible /v1 URL", _env_url),
    EnvVar("ENVCTL_AGENT_MODEL", "smoke LLM agent: model name", _env_text),
    EnvVar("ENVCTL_AGENT_API_KEY", "smoke LLM agent: API key", _env_text, secret=True),
    EnvVar("ENVCTL_JUDGE_BASE_URL", "smoke LLM judge: OpenAI-compatible /v1 URL", _env_url),
    EnvVar("ENVCTL_JUDGE_MODEL", "smoke LLM judge: model name", _env_text),
    EnvVar("ENVCTL_JUDGE_API_KEY", "smoke LLM judge: API key", _env_text, secret=True),
    EnvVar("AWS_REGION", "cloud: AWS region (like --region)", lambda v, w: validate_region(v, w)),
    EnvVar("ENVCTL_AWS_ENDPOINT_URL", "cloud: AWS endpoint (e.g. a moto server for tests)", _env_url),
    EnvVar("USER", "cloud: owner tag of the EC2 resources (default: the login name)", _env_text),
    EnvVar("PATH", "executable search path (Ansible runs with the venv's bin first)", _env_text),
    EnvVar("TMPDIR", "temporary files (Python's tempfile): a snapshot's copies of its site's volumes before they "
           "become an image layer (default /tmp; 'envctl doctor' warns when it runs short)", _env_path),
)
ENV_VAR_NAMES = frozenset(v.name for v in ENV_VARS)
ENV_TABLE_BEGIN, ENV_TABLE_END = "<!-- env-vars:begin -->", "<!-- env-vars:end -->"


def env_table() -> str:
    """README's table of every variable envctl reads (name, meaning), generated from :data:`ENV_VARS` by
    ``scripts/readme_env.py``; a test checks that README's copy agrees."""
    rows = [f"| `{v.name}` | {v.meaning.replace('|', chr(92) + '|')}{' (secret: masked by doctor)' if v.secret else ''} |"
            for v in ENV_VARS]
    return "\n".join([ENV_TABLE_BEGIN, "| variable | meaning |", "|---|---|", *rows, ENV_TABLE_END])


def env_var(name: str) -> EnvVar:
    return next(v for v in ENV_VARS if v.name == name)


def env_value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """``$name`` validated like the option it mirrors (None when unset or empty). Garbage raises
    :class:`UsageError` with one line naming the variable, never a traceback."""
    import os

    var = env_var(name)
    raw = (os.environ if environ is None else environ).get(name)
    if not raw:
        return None
    return _checked(var, raw)


def _checked(var: EnvVar, raw: str) -> Any:
    if var.check is None:
        return raw
    try:
        return var.check(raw, var.name)
    except UsageError as exc:
        if var.secret:  # the message may quote the value: say only which variable
            raise UsageError(f"invalid {var.name} (value not shown: it is a secret)", exc.hint) from None
        raise


def env_report(environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every variable of :data:`ENV_VARS`: name, meaning, value (secrets masked), set, problem."""
    import os

    from envctl.secrets import MASK

    env = os.environ if environ is None else environ
    rows = []
    for var in ENV_VARS:
        raw = env.get(var.name)
        problem = None
        if raw:
            try:
                _checked(var, raw)
            except UsageError as exc:
                problem = str(exc)
        shown = None if raw is None else MASK if var.secret and raw else \
            raw if raw.isprintable() and len(raw) <= 200 else _show(raw)
        rows.append({"name": var.name, "set": raw is not None, "value": shown, "meaning": var.meaning,
                     "problem": problem})
    return rows
