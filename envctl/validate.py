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
from typing import Iterable, Sequence

from envctl.errors import UsageError

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
    "validate_port", "validate_port_offset", "validate_token",
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
