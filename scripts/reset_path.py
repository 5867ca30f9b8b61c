"""Which envctl modules one reset passes through, from the CLI to the engine, and how often control goes
back and forth between them (issue 29: "the reset path from the CLI to the engine visits each module once").

Brings up reddit and the homepage (mini flavor) on instance ``reset-path`` (port offset 7000), waits until
reddit's spare is ready, then runs ``envctl reset reddit`` (a spare swap) and ``envctl reset reddit --tier
recreate`` (a new copy from the golden: the tier that boots and routes) in this process under a profiler hook
and counts, for each, over every call from one envctl module into another (every thread of the reset included):

- ``steps``: calls whose caller is in another envctl module than the callee (a module-to-module step);
- ``edges``: distinct (caller module -> callee module) pairs among them;
- ``re-entries``: calls into a module that is already on the call stack below another module (A -> B -> A:
  control going back up and down again, e.g. a lower module calling back into a higher one);
- ``bypasses``: calls into the engine layer (``envctl.backends``; before issue 29 ``envctl.provision``) from a
  module other than ``envctl.instance`` (its parts since issue 41) and the engine layer itself: the seam says
  Instance is its only user;
- per module, how many times it was entered from another module;
- ``paths to the engine``: at every call that reaches the engine (a function of the Docker wrapper, or the front
  proxy's control service: ``Control.call``), the chain of envctl modules on the stack from the CLI down (each
  run of one module counted once); printed distinct, each with its module-to-module steps and any module it
  visits twice (the back-and-forth issue 29 is about).

    .venv/bin/python scripts/reset_path.py [--keep]

Needs the mini images (``make images``). The instance is removed at the end unless ``--keep``.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import threading
import time
from types import FrameType
from typing import Any

from click.testing import CliRunner

INSTANCE = "reset-path"


def _module(frame: FrameType | None) -> str:
    return str(frame.f_globals.get("__name__", "")) if frame is not None else ""


def _ours(name: str) -> bool:
    return name == "envctl" or name.startswith("envctl.")


def _engine(name: str) -> bool:
    """A module of the engine layer (the seam's own types, ``envctl.backends.base``, and its registry are not)."""
    return name.startswith(("envctl.backends.", "envctl.provision")) and name != "envctl.backends.base"


ENGINE_MODULES = ("envctl.backends.docker", "envctl.provision.docker")


def _engine_call(frame: FrameType) -> bool:
    """A call that reaches the engine: into the Docker wrapper, or the proxy control service's request."""
    name = _module(frame)
    return name in ENGINE_MODULES or (frame.f_code.co_name == "call" and name.endswith(".proxy"))


class Tracer:
    def __init__(self) -> None:
        self.steps = 0
        self.reentries = 0
        self.edges: collections.Counter[tuple[str, str]] = collections.Counter()
        self.entered: collections.Counter[str] = collections.Counter()
        self.reentered: collections.Counter[str] = collections.Counter()
        self.bypasses: collections.Counter[tuple[str, str]] = collections.Counter()
        self.paths: collections.Counter[tuple[str, ...]] = collections.Counter()
        self.lock = threading.Lock()

    def _path(self, frame: FrameType) -> None:
        chain: list[str] = []
        f: FrameType | None = frame
        while f is not None:
            m = _module(f)
            if _ours(m) and (not chain or chain[-1] != m):
                chain.append(m)
            f = f.f_back
        if chain and chain[0] in ENGINE_MODULES and len(chain) > 1 and chain[1] in ENGINE_MODULES:
            return  # the wrapper calling itself: the path that reached it is counted once
        with self.lock:
            self.paths[tuple(reversed(chain))] += 1

    def hook(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        callee = _module(frame)
        if not _ours(callee):
            return
        if _engine_call(frame):
            self._path(frame)
        chain: list[str] = []  # the envctl modules on the stack below, consecutive duplicates collapsed
        f = frame.f_back
        while f is not None:
            m = _module(f)
            if _ours(m) and (not chain or chain[-1] != m):
                chain.append(m)
            f = f.f_back
        if not chain or chain[0] == callee:
            return
        with self.lock:
            self.steps += 1
            self.edges[(chain[0], callee)] += 1
            self.entered[callee] += 1
            if _engine(callee) and not _engine(chain[0]) and not (chain[0] + ".").startswith("envctl.instance."):
                self.bypasses[(chain[0], callee)] += 1
            if callee in chain[1:]:
                self.reentries += 1
                self.reentered[callee] += 1


def _results(output: str) -> list[dict[str, Any]]:
    """The JSON list a '--json' reset prints last (progress events come as JSON lines before it)."""
    start = output.rfind("\n[") + 1 if not output.startswith("[") else 0
    return list(json.loads(output[start:]))


def report(tracer: Tracer) -> None:
    print(f"module-to-module steps: {tracer.steps}")
    print(f"distinct module edges: {len(tracer.edges)}")
    print(f"re-entries (a module entered again while it is still on the stack below another): {tracer.reentries}")
    print(f"bypasses (engine-layer calls not made by envctl.instance): {sum(tracer.bypasses.values())}"
          + "".join(f"\n  {a} -> {b}: {n}" for (a, b), n in sorted(tracer.bypasses.items())))
    paths = sorted(tracer.paths)
    twice = [p for p in paths if len(set(p)) < len(p)]
    steps = sorted(len(p) - 1 for p in paths)
    print(f"paths to the engine: {len(paths)} distinct; module-to-module steps along them: "
          f"max {steps[-1] if steps else 0}, median {steps[len(steps) // 2] if steps else 0}; "
          f"paths that visit a module twice: {len(twice)}")
    for p in paths:
        again = sorted({m for m in p if p.count(m) > 1})
        print(f"  {len(p) - 1:2d} steps: {' -> '.join(m.removeprefix('envctl.') for m in p)}"
              + (f"   (twice: {', '.join(again)})" if again else ""))
    print("modules entered (from another module), most first:")
    for m, n in tracer.entered.most_common():
        times = tracer.reentered.get(m, 0)
        print(f"  {m:40s} {n:5d}" + (f"   re-entered {times}" if times else ""))
    print("edges:")
    for (a, b), n in sorted(tracer.edges.items()):
        print(f"  {a} -> {b}: {n}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", action="store_true", help="leave the instance running")
    args = ap.parse_args()
    from envctl.cli import cli

    runner = CliRunner()
    common = ["--instance", INSTANCE]
    print(f"[reset-path] up reddit homepage (mini) on instance {INSTANCE}", flush=True)
    r = runner.invoke(cli, ["up", "reddit", "homepage", "--flavor", "mini", "--port-offset", "7000", "--no-login",
                            *common], catch_exceptions=False)
    if r.exit_code != 0:
        print(r.output, file=sys.stderr)
        return 1
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        st = runner.invoke(cli, ["status", "--json", *common])
        rows = {s["site"]: s for s in json.loads(st.output)["sites"]} if st.exit_code == 0 else {}
        if rows.get("reddit", {}).get("spares_ready", 0) >= 1:
            break
        time.sleep(2)
    else:
        print("[reset-path] reddit's spare did not become ready within 300 s", file=sys.stderr)
        return 1
    ok = True
    for title, argv in (("spare swap", ["reset", "reddit", "--tier", "spare", "--json"]),
                        ("recreate", ["reset", "reddit", "--tier", "recreate", "--json"])):
        tracer = Tracer()
        threading.setprofile(tracer.hook)
        sys.setprofile(tracer.hook)
        try:
            r = runner.invoke(cli, [*argv, *common], catch_exceptions=False)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        ok = r.exit_code == 0
        tier = _results(r.stdout)[0]["tier"] if ok else "?"
        print(f"== envctl {' '.join(argv[:-1])} ({title}): exit {r.exit_code}, tier {tier}")
        report(tracer)
        if not ok:
            break
    if not args.keep:
        runner.invoke(cli, ["down", *common])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
