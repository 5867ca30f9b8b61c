"""A site's data on the swarm node that runs its copy (docs/architecture.md, "Data travels with placement").

What a site mounts from the data directory (a ZIM, the map's archives, the classifieds SQL) is fetched **on the
node**, before the copy starts, by envctl's node-data helper (:mod:`envctl.images.nodedata`, an image the manager
builds and the swarm's registry carries) run through the node's own engine: from the artifact's own mirrors
(the controller's bandwidth is not in the path), resumed from the node's partial file, verified against the pins
``envctl images get`` uses, unpacked into the node's data directory or the instance's volumes there. A node that
reaches no mirror gets the controller's own verified copy streamed to it (resumed from what it has). The node's
data directory is its cache, shared by every instance placed there; a node says what it holds in its labels
(``envctl.data.<file>=<sha256 prefix>``), which placement reads to prefer a node that holds a site's data, and
which ``envctl images list`` shows per node. A node whose disk cannot hold what it lacks is refused, in one line.
"""
from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from envctl.backends.base import DataItem, InstanceSettings, Progress, noop
from envctl.backends.docker import Engine
from envctl.backends.swarm import HELPER, Node, Swarm
from envctl.errors import DockerError, FetchError, UsageError

LABEL = "envctl.data."  # a node label per data file it holds: envctl.data.<key> = the first 16 hex of its sha256
HELPER_TIMEOUT = 24 * 3600.0  # a node's download of 100 GB at a slow mirror's pace: bounded, but not by the engine timeout


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


class SwarmData:
    """Data on the swarm's nodes: what each holds (its labels), room on its disk, and getting it there."""

    def __init__(self, swarm: Swarm) -> None:
        self.swarm = swarm
        self._locks: dict[str, threading.Lock] = {}

    # -- what nodes hold ----------------------------------------------------------------------------------
    @staticmethod
    def holds(node: Node, item: DataItem) -> bool:
        """Whether ``node``'s labels say it holds ``item`` (the pinned one, when it is pinned)."""
        have = node.labels.get(LABEL + item.key, "")
        return bool(have) and (item.sha256 is None or item.sha256.startswith(have))

    def lacking(self, node: Node, items: Sequence[DataItem]) -> list[DataItem]:
        return [i for i in items if not self.holds(node, i)]

    def held(self, items: Sequence[DataItem]) -> dict[str, dict[str, bool]]:
        return {n.hostname: {i.name: self.holds(n, i) for i in items}
                for n in sorted(self.swarm.nodes(fresh=True).values(), key=lambda n: n.hostname)}

    def free_disk(self, node: Node, path: str) -> int | None:
        """Bytes free on the node's filesystem holding ``path`` (its nearest existing ancestor); None: unknown."""
        try:
            self.swarm.helper_image(node.id)
            eng = self.swarm.engine(node.id)
            out = eng.run_cli(["run", "--rm", "--network", "none", "-v", "/:/host:ro", HELPER, "sh", "-c",
                               'p="/host$1"; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; '
                               'df -B1 --output=avail "$p" | tail -n 1', "sh", path], what="df on the node")
            return int(out.strip().splitlines()[-1])
        except (DockerError, ValueError, IndexError):
            return None

    def room_problem(self, node: Node, items: Sequence[DataItem]) -> str:
        """'' when ``node`` holds ``items`` or has the disk for what it lacks, else why not (one clause)."""
        missing = self.lacking(node, items)
        need = sum(i.bytes for i in missing)
        if not missing or need == 0:
            return ""
        free = self.free_disk(node, missing[0].data_root)
        if free is None or free >= need:
            return ""
        what = ", ".join(sorted({i.site for i in missing}))
        return f"{node.hostname} has {_gib(free)} free at {missing[0].data_root} for {what}'s data ({_gib(need)})"

    # -- getting it there -----------------------------------------------------------------------------------
    def place(self, settings: InstanceSettings, items: Sequence[DataItem], progress: Progress = noop, *,
              helper: str = "") -> dict[str, tuple[str, int]]:
        """Make the instance's node hold ``items`` (and the instance's volumes their unpacked contents) before a
        copy boots; one line naming the item, the node and every mirror's failure when it cannot."""
        if not items:
            return {}
        node = self.swarm.node(settings.node)
        todo = [i for i in items if i.volumes or not self.holds(node, i)]
        if not todo:
            return {}
        fetched: dict[str, tuple[str, int]] = {}
        if not helper:
            raise UsageError("no node-data helper image to fetch data on a swarm node with", "run 'envctl up' (it builds it)")
        with self._locks.setdefault(node.id, threading.Lock()):  # one fetch at a time per node in this process
            eng = self.swarm.engine(node.id)
            self.swarm.pull(node.id, helper)
            results = self._run(eng, helper, settings, node, todo, progress)
            for item in todo:
                res = results.get(item.name)
                if res is None or res.get("event") == "failed":
                    why = str((res or {}).get("message", "no answer"))
                    res = self._stream(eng, helper, settings, node, item, why, progress)
                sha = str(res.get("sha256", ""))
                if sha:
                    fetched[item.name] = (sha, int(str(res.get("size", 0) or 0)))
                if sha and not self.holds(node, item):
                    self.swarm.manager.run_cli(["node", "update", "--label-add", f"{LABEL}{item.key}={sha[:16]}",
                                                node.id], what="node update")
                progress(item.site, "data", f"{item.name} on {node.hostname}: {res.get('action', '?')}")
        self.swarm.nodes(fresh=True)
        return fetched

    def _mounts(self, eng: Engine, settings: InstanceSettings, items: Sequence[DataItem]) -> tuple[list[str], dict[str, str]]:
        roots = sorted({i.data_root for i in items})
        args = [a for r in roots for a in ("-v", f"{r}:{r}")]
        dirs: dict[str, str] = {}
        for v in sorted({v for i in items for v in i.volumes}):
            dirs[v] = f"/vol/{len(dirs)}"
            if not eng.volume_exists(v):
                eng.volume_create(v, {**settings.labels(), "envctl.artifact": "data"})
            args += ["-v", f"{v}:{dirs[v]}"]
        return args, dirs

    def _plan(self, settings: InstanceSettings, items: Sequence[DataItem], dirs: dict[str, str]) -> list[dict[str, object]]:
        return [{"name": i.name, "dest": i.dest, "data_root": i.data_root, "size": i.size, "sha256": i.sha256,
                 "sources": [{"kind": k, "mirror": m, "url": u} for k, m, u in i.sources], "extract": i.extract,
                 "instance": settings.name, "volume_dirs": {v: dirs[v] for v in i.volumes}} for i in items]

    def _run(self, eng: Engine, helper: str, settings: InstanceSettings, node: Node, items: Sequence[DataItem],
             progress: Progress) -> dict[str, dict[str, object]]:
        """The node-data helper's ``fetch`` of ``items`` on the node; its last event per item."""
        mounts, dirs = self._mounts(eng, settings, items)
        sites = {i.name: i.site for i in items}
        proc = subprocess.Popen(eng.argv("run", "--rm", "-i", *mounts, helper, "fetch"), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(self._plan(settings, items, dirs)))
        proc.stdin.close()
        last: dict[str, dict[str, object]] = {}
        try:
            for line in proc.stdout:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                name = str(ev.get("item", ""))
                if ev.get("event") in ("done", "failed") and name:
                    last[name] = ev
                elif ev.get("event") == "progress" and ev.get("total"):
                    progress(sites.get(name, "*"), "data", f"{name} on {node.hostname}: "
                             f"{int(ev['done']) / max(1, int(ev['total'])):.0%} from {ev.get('mirror', '?')}")
            proc.wait(timeout=HELPER_TIMEOUT)
        except BaseException:
            proc.kill()
            raise
        if proc.returncode != 0 and not last:  # it died before a word about any item: say how
            err = proc.stderr.read().strip() if proc.stderr else ""
            raise DockerError(f"the node-data helper on {node.hostname} failed (exit {proc.returncode}): {err[-300:]}",
                              f"see 'docker -H {eng.host} logs' and the node's disk")
        return last

    def _stream(self, eng: Engine, helper: str, settings: InstanceSettings, node: Node, item: DataItem, why: str,
                progress: Progress) -> dict[str, object]:
        """The controller's own copy of ``item`` streamed to the node (resumed from its partial file), when the node
        reached no mirror; FetchError naming both when the controller has no verified copy either."""
        local = Path(item.dest)
        if not local.is_file() or (item.size is not None and local.stat().st_size != item.size):
            raise FetchError(f"{item.site}: {node.hostname} could not fetch {item.name} ({why}), and this machine has "
                             f"no copy to send it", f"run 'envctl images get --flavor {settings.flavor} {item.site}' "
                             "here (the node then gets this copy), or let the node reach a mirror")
        mounts, dirs = self._mounts(eng, settings, [item])
        [plan] = self._plan(settings, [item], dirs)
        st = subprocess.run(eng.argv("run", "--rm", "-i", *mounts, helper, "status"), input=json.dumps([plan]),
                            capture_output=True, text=True, timeout=eng.timeout)
        offset = next((int(ev.get("partial", 0)) for ev in map(json.loads, st.stdout.splitlines() or ["{}"])
                       if ev.get("event") == "status"), 0)
        progress(item.site, "data", f"{item.name}: {node.hostname} reaches no mirror; sending this machine's copy "
                                    f"from byte {offset}")
        with open(local, "rb") as fh:
            fh.seek(offset)
            proc = subprocess.run(eng.argv("run", "--rm", "-i", *mounts, helper, "receive", str(offset),
                                           json.dumps(plan)), stdin=fh, capture_output=True, text=True,
                                  timeout=HELPER_TIMEOUT)
        events = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
        done = next((e for e in events if e.get("event") == "done"), None)
        if proc.returncode != 0 or done is None:
            bad = next((e.get("message") for e in events if e.get("event") == "failed"), proc.stderr.strip()[-300:])
            raise FetchError(f"{item.site}: sending {item.name} to {node.hostname} failed: {bad}",
                             "run the command again: the node resumes from what it received")
        return {"action": "sent from this machine", **done}


def data_items_json(items: Sequence[DataItem]) -> str:
    """The items as JSON (for logs and --json)."""
    return json.dumps([asdict(i) for i in items])


__all__ = ["SwarmData", "LABEL"]
