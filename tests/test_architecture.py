"""The package's shape (docs/architecture.md, "Layers" and "The engine seam"): imports run down the layers, never
in a circle; only a backend imports its engine library and nothing outside the backends reads their internals;
Instance is the one user of the backend and the one writer of the routing table; leasing imports no engine
module; the cloud package imports no local-engine type; only the cloud package talks to AWS and Ansible."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "envctl"

# Lowest first. A module may import its own layer or any lower one, never a higher one.
LAYERS: list[tuple[str, ...]] = [
    ("envctl.errors", "envctl.paths", "envctl.validate", "envctl.secrets"),
    ("envctl.catalog", "envctl.locks"),
    ("envctl.healthchecks", "envctl.plan", "envctl.backends.base", "envctl.routing"),  # the seam's types, the table
    ("envctl.backends", "envctl.images"),  # the engine: the backends, and the image getters that fill an engine
    ("envctl.instance",),  # the one user of the backend, the one writer of the routing table
    ("envctl.state", "envctl.auth", "envctl.smoke"),
    ("envctl.lab", "envctl.results", "envctl.leases.client"),  # the facade of one instance, its verbs' results; the lease client (HTTP only)
    ("envctl.leases",),  # the pool and its HTTP face: above Lab, which never imports them
    ("envctl.cloud",),  # machines for a lab (EC2, an SSH inventory) joined into a swarm by Ansible
    ("envctl.serve", "envctl.envformat", "envctl.doctor", "envctl.render", "envctl.playbooks"),
    ("envctl.cli", "envctl.__main__", "envctl"),
]
ENGINE_MODULES = ("envctl.backends.docker", "envctl.backends.local", "envctl.backends.swarm", "envctl.backends.swarm_copies")


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG.parent)
        if rel.parts[:3] == ("envctl", "images", "mini"):
            continue  # the mini stand-ins run inside their images; envctl never imports them
        out[".".join(rel.with_suffix("").parts).removesuffix(".__init__")] = f
    return out


def _layer(module: str) -> int:
    best, rank = -1, 0
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or (p != "envctl" and module.startswith(p + "."))) and len(p) > best:
                best, rank = len(p), i
    assert best >= 0, f"{module} is in no layer: add it to LAYERS (and docs/architecture.md)"
    return rank


def _absolute(path: Path, node: ast.ImportFrom) -> str | None:
    """The absolute module an ``ImportFrom`` names, relative ones (``from .x import y``) resolved against ``path``."""
    if node.level == 0:
        return node.module
    rel = path.relative_to(PKG.parent).with_suffix("").parts
    package = list(rel[:-1] if rel[-1] != "__init__" else rel[:-1])
    base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(base + ([node.module] if node.module else [])) or None


def _imports(path: Path, known: set[str]) -> set[str]:
    """Every envctl module ``path`` imports, at any depth (inside functions and TYPE_CHECKING too), relative
    imports resolved."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (module := _absolute(path, node)):
            names = [module] + [f"{module}.{a.name}" for a in node.names]
        for n in names:
            if n in known:
                found.add(n)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: _imports(p, known) - {m} for m, p in mods.items()}


def test_every_module_has_a_layer() -> None:
    for m in _modules():
        _layer(m)


def test_no_import_runs_up_the_layers() -> None:
    bad = [f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
           for a, deps in _graph().items() for b in deps if _layer(b) > _layer(a)]
    assert not bad, "\n".join(bad)


def test_no_import_circle() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # Tarjan
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            strong(v)
    assert not circles, circles


def test_no_package_imports_its_own_package_defensively() -> None:
    """No ``try: import envctl.x / except ImportError`` inside the package."""
    bad = []
    for m, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Try) and any(
                    isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers):
                for sub in node.body:
                    if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("envctl"):
                        bad.append(m)
    assert not bad, bad


DOCKER_ARGV = re.compile(r"""\[\s*["']docker["']\s*,""")


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("module", sorted(_modules()))
def test_only_a_backend_talks_to_its_engine(module: str) -> None:
    """python-on-whales and the docker CLI: only in the backends (their engine library)."""
    if _in(module, "envctl.backends") and module != "envctl.backends.base":
        return
    text = _modules()[module].read_text()
    assert "python_on_whales" not in text, f"{module} imports python-on-whales; go through envctl.instance.Instance"
    assert not DOCKER_ARGV.search(text), f"{module} runs the docker CLI; go through envctl.instance.Instance"


def test_nothing_outside_a_backend_reads_its_internals() -> None:
    """The engine modules are imported by the backends and the image getters only (envctl.images fills an
    engine with images); everyone else goes through Instance, which imports only the registry and the seam."""
    graph = _graph()
    bad = sorted(f"{m} imports {d}" for m, deps in graph.items() for d in deps
                 if any(_in(d, e) for e in ENGINE_MODULES)
                 and not (_in(m, "envctl.backends") or _in(m, "envctl.images")))
    assert not bad, "\n".join(bad)
    users = sorted(m for m, deps in graph.items() if "envctl.backends" in deps and not _in(m, "envctl.backends"))
    assert users == ["envctl.instance"], f"only Instance uses the backend registry: {users}"


def test_instance_is_the_one_writer_of_the_routing_table() -> None:
    """Only envctl.instance changes the table (``_routing``) or applies one to the proxy (``proxy.apply/settle``)."""
    bad = []
    for module, path in _modules().items():
        if _in(module, "envctl.instance"):
            continue
        text = path.read_text()
        if re.search(r"\._routing\(|\bproxy\.(apply|settle)\(", text):
            bad.append(module)
    assert not bad, f"only envctl.instance writes the routing table: {bad}"


def test_leasing_imports_no_engine_module_and_cloud_no_local_engine_type() -> None:
    graph = _graph()
    engine_side = ("envctl.backends", "envctl.routing", "envctl.instance", "envctl.images", "envctl.state")
    bad = sorted(f"{m} imports {d}" for m, deps in graph.items() if _in(m, "envctl.leases")
                 for d in deps if any(_in(d, e) for e in engine_side))
    bad += sorted(f"{m} imports {d}" for m, deps in graph.items() if _in(m, "envctl.cloud")
                  for d in deps if any(_in(d, e) for e in engine_side + ("envctl.lab", "envctl.leases")))
    assert not bad, "\n".join(bad)


CLI_MAY_IMPORT = {"envctl", "envctl.errors", "envctl.catalog", "envctl.lab", "envctl.render", "envctl.envformat",
                  "envctl.doctor", "envctl.serve", "envctl.images", "envctl.smoke", "envctl.cloud", "envctl.locks",
                  "envctl.validate", "envctl.plan", "envctl.leases", "envctl.leases.client"}


def test_the_cli_calls_the_library_facades_only() -> None:
    mods = _modules()
    internal = set()
    for m in mods:
        if _in(m, "envctl.cli"):
            internal |= {d for d in _imports(mods[m], set(mods)) if not _in(d, "envctl.cli")
                         and d not in CLI_MAY_IMPORT and not any(d.startswith(p + ".") and p in ("envctl.catalog",
                                                                                                    "envctl.images",
                                                                                                    "envctl.smoke",
                                                                                                    "envctl.cloud")
                                                                   for p in CLI_MAY_IMPORT)}
    assert not internal, f"envctl/cli imports library internals: {sorted(internal)}"


CLOUD_LIBRARIES = ("boto3", "botocore", "ansible_runner")


def _third_party_imports(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_cloud_package_talks_to_aws_and_ansible() -> None:
    bad = sorted(f"{m} imports {lib}" for m, p in _modules().items() if not _in(m, "envctl.cloud")
                 for lib in _third_party_imports(p) & set(CLOUD_LIBRARIES))
    assert not bad, "\n".join(bad) + "\ngo through envctl.cloud (aws.py for boto3, ansible.py for ansible-runner)"
    users = {lib for m, p in _modules().items() if m.startswith("envctl.cloud.") for lib in _third_party_imports(p)}
    assert {"boto3", "ansible_runner"} <= users  # the check above looks for the right names


def test_leasing_has_one_home_and_lab_never_imports_the_pool() -> None:
    """The pool, its HTTP face and its one client live in envctl.leases; Lab imports none of it, and no module
    outside envctl.leases speaks the lease protocol with its own HTTP calls."""
    graph = _graph()
    assert not {d for d in graph["envctl.lab"] if _in(d, "envctl.leases")}
    assert "envctl.leases.pool" not in graph["envctl.leases.client"]
    for module, path in _modules().items():
        if module.startswith("envctl.leases"):
            continue
        text = path.read_text()
        assert not re.search(r"requests\.\w+\([^)]*/leases", text), f"{module} calls the lease API itself"


LONG = "Long because:"  # a function over MAX_FUNCTION lines says why at its top (its docstring)
MAX_MODULE, MAX_FUNCTION = 800, 80


def test_no_module_over_800_lines_and_no_function_over_80_without_a_reason() -> None:
    big = [f"{m}: {len(p.read_text().splitlines())} lines" for m, p in _modules().items()
           if len(p.read_text().splitlines()) > MAX_MODULE]
    long = []
    for m, p in _modules().items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION and LONG not in (ast.get_docstring(node) or ""):
                    long.append(f"{m}.{node.name}: {length} lines")
    assert not big and not long, "\n".join(big + long)


# -- issue 41: what the seam's narrowing keeps true ----------------------------------------------------------------

ROOT = PKG.parent
PUBLIC_UNDERSCORE = {"_replace", "_asdict", "_fields", "_make"}  # namedtuple's public API


def _ours() -> dict[str, Path]:
    """The package's modules and every bench and script (they use envctl as a user's code would)."""
    out = dict(_modules())
    for folder in ("bench", "scripts"):
        for f in sorted((ROOT / folder).glob("*.py")):
            out[f"{folder}.{f.stem}"] = f
    return out


def private_reaches(path: Path) -> list[str]:
    """Where ``path`` imports a private name of another envctl module, or reads one through a name it imported
    from envctl (``fetch._session``, ``from envctl.x import _y``)."""
    tree = ast.parse(path.read_text())
    bad, imported = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("envctl"):
            for a in node.names:
                imported.add(a.asname or a.name)
                if a.name.startswith("_") and not a.name.startswith("__"):
                    bad.append(f"line {node.lineno}: from {node.module} import {a.name}")
        elif isinstance(node, ast.Import):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("envctl")}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and node.attr not in PUBLIC_UNDERSCORE and isinstance(node.value, ast.Name)
                and node.value.id in imported):
            bad.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return bad


@pytest.mark.parametrize("module", sorted(_ours()))
def test_no_private_name_is_used_across_modules(module: str) -> None:
    bad = private_reaches(_ours()[module])
    assert not bad, f"{module} uses another module's private names (make them public, or keep them home): {bad}"


# a bench of the control service's own protocol, on a bare proxy of its own (no instance, no table of one)
OWN_PROXY = {"bench.proxy_flip"}


def test_benches_and_scripts_write_the_routing_table_only_through_the_public_api() -> None:
    bad = [m for m, p in _ours().items() if not m.startswith("envctl.") and m not in OWN_PROXY
           and re.search(r"\._routing\(|\bproxy\.(apply|settle)\(", p.read_text())]
    assert not bad, f"bench/ and scripts/ change the routing table through Instance's public methods: {bad}"


def test_the_catalogs_tier_words_are_the_tier_registry_and_the_clis() -> None:
    from typing import get_args

    from envctl.catalog.model import Tier
    from envctl.state.tiers import TIERS
    from envctl.validate import TIER_WORDS

    assert tuple(get_args(Tier)) == tuple(TIERS) == TIER_WORDS


def test_the_backend_names_validate_accepts_are_the_registry() -> None:
    from envctl.backends import KINDS
    from envctl.validate import BACKENDS

    assert tuple(KINDS) == BACKENDS


def test_each_part_of_the_seam_is_small_and_typed() -> None:
    """Backend is four parts (Copies, Images, FrontProxy, Placement), each at most 12 methods, every one annotated
    with its return type; every backend implements every part."""
    from envctl.backends import base

    for part in (base.Copies, base.Images, base.FrontProxy, base.Placement):
        methods = [n for n, v in vars(part).items() if callable(v) and not n.startswith("__")]
        assert len(methods) <= 12, (part.__name__, methods)
        for n in methods:
            assert "return" in getattr(part, n).__annotations__, f"{part.__name__}.{n} has no return type"
    assert [f.name for f in __import__("dataclasses").fields(base.Backend)] == ["kind", "copies", "images", "proxy",
                                                                               "placement"]


def test_a_broken_rule_fails_its_test(tmp_path: Path) -> None:
    """The rules above are not vacuous: a module that reaches another's private name is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("from envctl.images import fetch\nfrom envctl.instance import _hidden\nfetch._session()\n")
    assert len(private_reaches(bad)) == 2
