"""Loading the catalog: ``sites.yaml`` read safely (size, depth, aliases bounded), checked for the flavor rule,
validated into :class:`~envctl.catalog.model.Catalog` with one :class:`CatalogError` naming every problem."""
from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from envctl.errors import CatalogError
from envctl.catalog.model import Catalog, BUILTIN


# -- loading ---------------------------------------------------------------------------------

def _loc(loc: tuple[Any, ...]) -> str:
    parts = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif isinstance(p, str) and not p.startswith(("function-", "literal[", "union[", "int", "constrained")):
            parts.append(("." if parts else "") + p)
    return "".join(parts).replace(".[", "[")


def _describe(err: dict[str, Any]) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        return "unknown key (remove it or check its spelling)"
    if kind == "missing":
        return "missing required field"
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    got = err.get("input")
    shown = _short(got) if not isinstance(got, (dict, list, tuple)) else "list" if isinstance(got, (list, tuple)) else "mapping"
    return f"{msg[:1].lower()}{msg[1:]} (got {shown})"  # only the first letter: 'GET' stays 'GET'


# docs/architecture.md, "Flavors": a flavor overrides only a service's image, build and memory and the site's
# description and artifacts; everything else belongs to the site and runs unchanged on every flavor.
SERVICE_FLAVOR_KEYS = frozenset({"image", "build", "memory"})
SITE_FLAVOR_KEYS = frozenset({"description", "artifacts"})


def _mapping(value: Any) -> dict[Any, Any]:
    """``value`` when it is a mapping, else {} (its wrong type is reported by the model validation)."""
    return value if isinstance(value, dict) else {}


def _flavor_override_problems(raw: dict[str, Any]) -> list[str]:
    """One problem per flavor key that is not allowed (SERVICE_FLAVOR_KEYS, SITE_FLAVOR_KEYS), named by its path."""
    problems = []
    sites: dict[str, Any] = raw["sites"] if isinstance(raw.get("sites"), dict) else {}
    for sname, site in sites.items():
        if not isinstance(site, dict):
            continue
        flavors = [(f"sites.{sname}.flavors.{fname}", f, SITE_FLAVOR_KEYS, "a site flavor may override only "
                    "'description' and 'artifacts'; move it to the site so it runs on every flavor")
                   for fname, f in _mapping(site.get("flavors")).items()]
        for vname, svc in _mapping(site.get("services")).items():
            flavors += [(f"sites.{sname}.services.{vname}.flavors.{fname}", f, SERVICE_FLAVOR_KEYS,
                         "a flavor may override only a service's 'image', 'build' and 'memory'; move it to the "
                         "service so it runs on every flavor")
                        for fname, f in _mapping(_mapping(svc).get("flavors")).items()]
        for where, f, allowed, why in flavors:
            for key in (f if isinstance(f, dict) else {}):
                path = f"{where}.{key}"
                if key not in allowed:
                    problems.append(f"{path}: {why}")
    return problems


CATALOG_MAX_BYTES = 4 * 1024 * 1024  # the built-in catalog is ~40 KB
CATALOG_MAX_DEPTH = 64  # nesting of mappings and lists (the built-in catalog: 9)
CATALOG_MAX_NODES = 200_000  # values after YAML aliases are expanded (the built-in catalog: a few thousand)


_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present: 20x faster


class _CatalogLoader(_BaseLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last one
    silently: a site defined twice would replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # '<<' merges: explicit keys override merged ones, as YAML says
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # unhashable: the base class reports it
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {_short(key)} (first given on line {first.line + 1}); "
                        "remove one of them", key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def _nesting_problem(text: str) -> str | None:
    """Nesting deeper than CATALOG_MAX_DEPTH, found on the parser's event stream (iterative) before
    the recursive composer could exhaust the stack."""
    depth = 0
    for event in yaml.parse(text, Loader=_BaseLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > CATALOG_MAX_DEPTH:
                mark = event.start_mark
                at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
                return f"{at}nested deeper than {CATALOG_MAX_DEPTH} levels"
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    return None


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: one line, whatever the value holds."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _one_line(text: str) -> str:
    """Control characters (a newline in a YAML key or value quoted into a message) escaped."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def _read_catalog(p: Path) -> str:
    """The catalog's text, or CatalogError naming the path: a missing, unreadable or oversized file,
    a directory or a FIFO (never opened, so it cannot hang) or device, text that is not UTF-8."""
    where = _one_line(str(p))

    def fail(problem: str) -> CatalogError:
        return CatalogError(where, [problem])

    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        raise fail("file not found") from None
    except PermissionError:
        raise fail("cannot be read (permission denied)") from None
    except ValueError:  # a NUL in the path
        raise fail("the path contains a NUL byte") from None
    except OSError as exc:
        raise fail(f"cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise fail("is a directory; give the catalog's YAML file")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device"
        raise fail(f"is {kind}, not a regular file; give the catalog's YAML file")
    if st.st_size > CATALOG_MAX_BYTES:
        raise fail(f"is {st.st_size} bytes, larger than the {CATALOG_MAX_BYTES // (1024 * 1024)} MiB limit")
    try:  # O_NONBLOCK: were it swapped for a FIFO since the stat, the open still returns at once
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except PermissionError:
        raise fail("cannot be read (permission denied)") from None
    except OSError as exc:
        raise fail(f"cannot be read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise fail("is not a regular file; give the catalog's YAML file")
        try:
            data = fh.read(CATALOG_MAX_BYTES + 1)
        except OSError as exc:
            raise fail(f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > CATALOG_MAX_BYTES:
        raise fail(f"is larger than the {CATALOG_MAX_BYTES // (1024 * 1024)} MiB limit")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"byte {exc.start}: not UTF-8 text") from None


def _shape_problems(raw: Any) -> list[str]:
    """What no model field may hold, found anywhere in the loaded YAML: NUL bytes in strings (keys
    too), non-finite numbers, nesting deeper than CATALOG_MAX_DEPTH or more than CATALOG_MAX_NODES
    values once aliases are expanded (a self-referencing alias is infinitely deep). Iterative, so a
    hostile file cannot exhaust the stack."""
    problems: list[str] = []
    count = 0
    stack: list[tuple[str, Any, int]] = [("", raw, 0)]
    while stack:
        where, value, depth = stack.pop()
        count += 1
        if count > CATALOG_MAX_NODES:
            return [f"more than {CATALOG_MAX_NODES} values (YAML aliases expanded); a catalog is far smaller"]
        if depth > CATALOG_MAX_DEPTH:
            return [f"{where or 'top level'}: nested deeper than {CATALOG_MAX_DEPTH} levels"]
        if isinstance(value, str) and "\0" in value:
            problems.append(f"{where or 'top level'}: contains a NUL byte")
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{where or 'top level'}: {value!r} is not a finite number")
        elif isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str) and "\0" in k:
                    problems.append(f"{where or 'top level'}: key {_short(k)} contains a NUL byte")
                stack.append((f"{where}.{k}" if where else str(k), v, depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{where}[{i}]", v, depth + 1) for i, v in enumerate(value))
    return [_one_line(p) for p in problems]


def _tuples(value: Any) -> Any:
    """YAML lists as tuples, so strict validation accepts them for the models' tuple fields."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def load_catalog(path: str | os.PathLike[str] | None = None) -> Catalog:
    """Load and validate a catalog: ``path``, else ``$ENVCTL_CATALOG``, else the built-in one.

    Every refusal is a :class:`CatalogError` of one line per problem naming the file (and the path
    inside it): duplicate keys, NUL bytes, inf/nan, a string or boolean where a number is expected
    (validation is strict: no undocumented coercion), absolute or '..' paths, bad site and service
    names, two listeners on one public port, too deep, too large, not a regular file."""
    p = Path(path or os.environ.get("ENVCTL_CATALOG") or BUILTIN)
    where = _one_line(str(p))
    text = _read_catalog(p)
    try:
        deep = _nesting_problem(text)
        if deep:
            raise CatalogError(where, [deep])
        raw = yaml.load(text, Loader=_CatalogLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = exc.problem or "unknown problem"
        if "maximum nesting depth" in problem:  # libyaml's own limit (1000), met before ours on a flow collection
            raise CatalogError(where, [f"{at}nested deeper than {CATALOG_MAX_DEPTH} levels"]) from None
        if isinstance(exc, yaml.constructor.ConstructorError) and problem.startswith("duplicate key"):
            raise CatalogError(where, [_one_line(f"{at}{problem}")]) from None
        raise CatalogError(where, [_one_line(f"{at}not valid YAML ({problem})")]) from None
    except yaml.reader.ReaderError as exc:
        raise CatalogError(where, [_one_line(f"character {exc.position}: not valid YAML "
                                             f"(unacceptable character {exc.character!r})")]) from None
    except yaml.YAMLError as exc:
        raise CatalogError(where, [_one_line(f"not valid YAML ({exc})")]) from None
    except RecursionError:
        raise CatalogError(where, [f"nested deeper than {CATALOG_MAX_DEPTH} levels"]) from None
    if not isinstance(raw, dict):
        raise CatalogError(where, ["top level must be a mapping with 'version' and 'sites'"])
    shape = _shape_problems(raw)
    if shape:
        raise CatalogError(where, shape)
    overrides = _flavor_override_problems(raw)
    if overrides:
        raise CatalogError(where, [_one_line(o) for o in overrides])
    try:
        return Catalog.model_validate(_tuples(raw), strict=True)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = _loc(err["loc"])
            problems.append(_one_line(f"{loc}: {_describe(dict(err))}" if loc else _describe(dict(err))))
        raise CatalogError(where, problems) from None

