#!/usr/bin/env python3
"""``make rehearse``: drive the full (or slim) flavor end to end, from a local mirror and registry of replicas.

The full flavor (upstream images, 300 GB) cannot be downloaded here, but its whole path can run:
this script publishes the mini images under the upstream names and in the upstream shapes, then
drives ``--flavor full`` through ``images get -> load/pull -> extract -> up -> configure -> login ->
write -> verify -> snapshot create -> reset -> verify -> (write -> reset --tier inplace -> verify, for a site
with in-place steps) -> snapshot restore -> down`` for every site.

* A local HTTP mirror (Range support) serves ``docker save`` tarballs of the mini images under the
  upstream file names (``shopping_final_0712.tar`` holding ``shopping_final_0712:latest``, the
  ``.tar.gz`` ones gzipped) and data archives shaped like upstream's: the same entry prefixes
  (``projects/ogma3/docker/volumes/osm-data/_data/...``, ``classifieds_docker_compose/mysql/...``),
  the same file names, the mini image's own data inside (the ZIM, the SQL dump, the website tree).
* A local registry (Debian's ``docker-registry``) holds the mini images under the upstream repository
  names (``library/mysql:8.1``, ``kiwix/kiwix-serve:3.3.0``, ...); ``ENVCTL_REGISTRY_MIRROR`` points
  ``images get`` at it, so registry images are really pulled.
* The catalog is the built-in one with only the full-flavor artifacts' ``sources``, ``size`` and
  ``sha256`` replaced (checked below), passed with ``ENVCTL_CATALOG``; sizes and SHA-256 are pinned in
  a test ``images.lock`` in the rehearsal's data dir, so every download is verified against a pin.

Which mini image replicates which upstream one comes from the catalog (the service's ``mini`` and
``full`` images). One line per site with its verdict and phase timings; exit 0 only if every site
passes. ``--keep`` leaves the work dir, registry data and instance for inspection.

``--flavor slim`` rehearses webarena-verified's images the same way (docs/flavors/slim.md). Each
``am1n3e/webarena-verified-<site>:latest`` is a replica built here FROM the site's mini image with the slim
shape where it matters to envctl (scripts/slim-replica/: a stand-in env-ctrl on 8877 that stays off with
``WA_ENV_CTRL_ENABLE=false``, wikipedia's kiwix-serve on ``$WA_ENV_CTRL_KIWIX_PORT`` (default 8080), GitLab's
gitlab.rb with ``nginx['listen_port'] = 8023``), pushed to the local registry under upstream's repository name;
its digest is pinned in the rehearsal's ``images.lock`` (upstream names none), so ``images get`` pulls it by
that digest through ``ENVCTL_REGISTRY_MIRROR``. The slim sites without images of their own (classifieds, the
homepage) run their full images, as the catalog says. After ``up``, a ``shape`` phase checks the replica from
inside: env-ctrl off where the catalog switches it off, GitLab's ``listen_port`` rewritten to the public port.
"""
from __future__ import annotations

import argparse
import copy
import fcntl
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import requests
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fetch_server import FaultServer  # noqa: E402  (the tests' Range-capable file server)

from envctl.catalog import BUILTIN, load_catalog  # noqa: E402
from envctl.images.build import mini_tag  # noqa: E402
from envctl.images.lock import LockFile, Pin  # noqa: E402
from envctl.images.registry import mirror_ref  # noqa: E402

# --instance / --port-offset (or ENVCTL_REHEARSE_INSTANCE / ENVCTL_REHEARSE_OFFSET) let a second rehearsal run
# beside this one on the same engine.
INSTANCE = os.environ.get("ENVCTL_REHEARSE_INSTANCE", "rehearse")
# public ports 8000-14999: below the ephemeral range (the mirror and registry ports come from it), and apart
# from every port the test lanes publish (make test runs the rehearsal beside pytest lane a: tests/conftest.py).
# make test runs the slim rehearsal beside it at offset 6000 (10399-15999, none of the full one's ports).
OFFSET = int(os.environ.get("ENVCTL_REHEARSE_OFFSET", "5000"))
FLAVOR = "full"  # --flavor: full or slim
FLAVORS = ("full", "slim")
REGISTRY_BIN = "/usr/bin/docker-registry"
SLIM_REPLICA = ROOT / "scripts" / "slim-replica"  # the files a slim replica adds to its mini image
# Where each slim site listens inside upstream's image (docs/flavors/slim.md, "Ports"): WA_CONTAINER_PORT.
SLIM_SITE_PORT = {"shopping": 80, "shopping_admin": 80, "reddit": 80, "gitlab": 8023, "wikipedia": 8080}
SEED = "/usr/share/envctl/seed"  # where a mini image keeps the data it copies into an empty data mount
MARK = "[rehearsal]"


def log(msg: str) -> None:
    print(f"[rehearse] {msg}", flush=True)


def sh(*argv: str, check: bool = True, capture: bool = True, stdin: Any = None) -> subprocess.CompletedProcess:
    p = subprocess.run(list(argv), capture_output=capture, text=True, check=False, stdin=stdin)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {p.returncode}: {(p.stderr or p.stdout or '').strip()[-600:]}")
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def upstream_tags() -> Iterator[None]:
    """Held while upstream-named tags that two rehearsals share are made, used or removed.

    ``make test`` runs the full rehearsal (lane b) and the slim one (lane a) on one engine, and both
    drive classifieds, whose images (``jykoh/classifieds``, ``mysql:8.1``) are the same on both flavors:
    one rehearsal's removal of such a tag must not land inside the other's get..down of that site.
    """
    with open(Path(tempfile.gettempdir()) / "envctl-rehearse-upstream-tags.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def shared_images(cat: Any) -> set[str]:
    """Upstream images (not envctl's) that artifacts of more than one flavor name."""
    seen: dict[str, set[str]] = {}
    for site in cat.sites.values():
        for fname, f in site.flavors.items():
            for a in f.artifacts:
                if a.image and not a.image.startswith("envctl"):
                    seen.setdefault(a.image, set()).add(fname)
    return {image for image, flavors in seen.items() if len(flavors) > 1}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- the writes an agent would make (through each site's own database client, as upstream) ---------

@dataclass(frozen=True)
class Write:
    service: str | None
    write: list[str]
    count: list[str]  # prints how many rows carry MARK


_MAGENTO = ["mysql", "-u", "magentouser", "-pMyPassword", "magentodb", "-N", "-e"]
_PG_POSTMILL = ["env", "PGPASSWORD=postmill", "psql", "-h", "localhost", "-U", "postmill", "-d", "postmill", "-At", "-c"]
_PG_GITLAB = ["gitlab-psql", "-d", "gitlabhq_production", "-At", "-c"]
_OSCLASS = ["mysql", "-u", "root", "-ppassword", "osclass", "-N", "-e"]
WRITES = {
    "shopping": Write(None, _MAGENTO + [f"UPDATE catalog_product_entity_varchar SET value = CONCAT(value, ' {MARK}') "
                                         "ORDER BY value_id LIMIT 1"],
                      _MAGENTO + [f"SELECT COUNT(*) FROM catalog_product_entity_varchar WHERE value LIKE '%{MARK}%'"]),
    "reddit": Write(None, _PG_POSTMILL + [f"UPDATE submissions SET title = title || ' {MARK}' "
                                          "WHERE id = (SELECT min(id) FROM submissions)"],
                    _PG_POSTMILL + [f"SELECT count(*) FROM submissions WHERE title LIKE '%{MARK}%'"]),
    "gitlab": Write(None, _PG_GITLAB + [f"UPDATE issues SET title = title || ' {MARK}' WHERE id = (SELECT min(id) FROM issues)"],
                    _PG_GITLAB + [f"SELECT count(*) FROM issues WHERE title LIKE '%{MARK}%'"]),
    "classifieds": Write("db", _OSCLASS + [f"UPDATE oc_t_item_description SET s_title = CONCAT(s_title, ' {MARK}') "
                                           "ORDER BY fk_i_item_id LIMIT 1"],
                         _OSCLASS + [f"SELECT COUNT(*) FROM oc_t_item_description WHERE s_title LIKE '%{MARK}%'"]),
}
WRITES["shopping_admin"] = WRITES["shopping"]


# -- replicas ------------------------------------------------------------------------------------

class Replicas:
    """Builds the mirror's files and the registry's repositories from the mini images."""

    def __init__(self, work: Path, server: FaultServer, registry: str) -> None:
        self.cat = load_catalog()
        self.work, self.server, self.registry = work, server, registry
        self.mirror = work / "mirror"
        self.mirror.mkdir(parents=True, exist_ok=True)
        self.lock = LockFile(work / "data" / "images.lock")
        self.upstream_tags: set[str] = set()  # removed again at the end
        # upstream image -> (site, the mini image of the same service)
        self.replica_of: dict[str, tuple[str, str]] = {}
        for name, site in self.cat.sites.items():
            for svc in site.services.values():
                up, mini = svc.flavors.get(FLAVOR), svc.flavors.get("mini")
                if up and mini and up.image != mini.image:
                    self.replica_of.setdefault(up.image, (name, mini.image))
        self.slim_built: dict[str, str] = {}

    def _mini_for(self, image: str) -> str:
        if image not in self.replica_of:
            raise RuntimeError(f"no mini image replicates {image}: give its service a mini flavor in sites.yaml")
        site, mini = self.replica_of[image]
        if image.startswith("am1n3e/webarena-verified-"):
            return self.slim_replica(site, image, mini)
        return mini

    def slim_replica(self, site: str, image: str, mini: str) -> str:
        """Build (once) the replica of webarena-verified's ``image``: ``mini`` plus the slim shape."""
        if image in self.slim_built:
            return self.slim_built[image]
        ctx = self.work / "slim-replica" / site
        ctx.mkdir(parents=True, exist_ok=True)
        for f in ("env_ctrl.py", "entrypoint.sh", "gitlab-ctl"):
            shutil.copy2(SLIM_REPLICA / f, ctx / f)
        cfg = json.loads(sh("docker", "image", "inspect", "-f", "{{json .Config}}", mini).stdout)
        entry, cmd = cfg.get("Entrypoint") or [], cfg.get("Cmd") or []
        env = {"WA_ENV_CTRL_TYPE": site, "WA_ENV_CTRL_PORT": "8877", "WA_CONTAINER_PORT": str(SLIM_SITE_PORT[site])}
        lines = [f"# envctl rehearsal replica of {image} (scripts/rehearse.py --flavor slim)", f"FROM {mini}"]
        if site == "wikipedia":
            # upstream's is kiwix-serve 3.3.0 plus env-ctrl (Python); the mini kiwix image has no Python: the
            # mini base's Debian Python (the same bookworm libraries) runs the stand-in
            base = mini_tag("base")
            expat = sh("docker", "run", "--rm", "--entrypoint", "sh", base, "-c",
                       "readlink -f /usr/lib/*-linux-gnu/libexpat.so.1").stdout.strip()  # the one library kiwix lacks
            lines += [f"COPY --from={base} /usr/bin/python3.11 /usr/bin/python3",
                      f"COPY --from={base} /usr/lib/python3.11 /usr/lib/python3.11",
                      f"COPY --from={base} {expat} {Path(expat).parent}/libexpat.so.1"]
            env |= {"WA_ENV_CTRL_KIWIX_PORT": "8080", "WA_ENV_CTRL_ZIM_FILE": "/data/wikipedia_en_all_maxi_2022-05.zim"}
            cmd = []  # as upstream's: no argument serves $WA_ENV_CTRL_ZIM_FILE, a first argument replaces it
        if site == "gitlab":
            rb = (ROOT / "envctl" / "images" / "mini" / "gitlab" / "files" / "gitlab.rb").read_text()
            (ctx / "gitlab.rb").write_text(rb.rstrip("\n") + "\n\n# webarena-verified's slim gitlab.rb "
                                           "(site/gitlab/docker_overrides/gitlab.rb)\nnginx['listen_port'] = 8023\n")
            # COPY, not RUN: /etc/gitlab is a declared VOLUME, where a RUN's changes are dropped
            lines += ["COPY gitlab.rb /etc/gitlab/gitlab.rb", "COPY gitlab-ctl /opt/gitlab/bin/gitlab-ctl"]
        lines += ["ENV " + " ".join(f"{k}={v}" for k, v in env.items()),
                  "COPY env_ctrl.py entrypoint.sh /usr/local/lib/wa-env-ctrl/",
                  "EXPOSE 8877",
                  f'LABEL org.envctl.built-by="envctl" org.envctl.replica-of="{image}"',
                  "ENTRYPOINT " + json.dumps(["/bin/sh", "/usr/local/lib/wa-env-ctrl/entrypoint.sh", *entry]),
                  "CMD " + json.dumps(cmd)]
        (ctx / "Dockerfile").write_text("\n".join(lines) + "\n")
        tag = f"envctl-slim-replica/{site}:rehearsal"
        p = subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], capture_output=True, text=True,
                           env={**os.environ, "DOCKER_BUILDKIT": "0"})
        if p.returncode != 0:
            raise RuntimeError(f"building the slim replica of {image} failed: {(p.stderr or p.stdout).strip()[-600:]}")
        self.slim_built[image] = tag
        return tag

    def _serve(self, name: str, path: Path) -> dict[str, Any]:
        self.server.paths[name] = str(path)
        size, digest = path.stat().st_size, sha256_of(path)
        self.lock.record(Pin(name, size=size, sha256=digest, mirror="rehearsal"))
        return {"sources": [{"kind": "http", "mirror": "rehearsal", "url": self.server.url("ok", name)}], "size": size}

    def tarball(self, art: Any) -> dict[str, Any]:
        """``docker save`` of the mini image, tagged with the upstream name, under the upstream file name."""
        with upstream_tags():
            return self._tarball(art)

    def _tarball(self, art: Any) -> dict[str, Any]:
        mini = self._mini_for(art.image)
        sh("docker", "tag", mini, art.image)
        out = self.mirror / art.name
        try:
            with out.open("wb") as f:
                save = subprocess.Popen(["docker", "save", art.image], stdout=subprocess.PIPE)
                assert save.stdout is not None
                sink: Any = gzip.GzipFile(fileobj=f, mode="wb", compresslevel=1) if art.name.endswith(".gz") else f
                shutil.copyfileobj(save.stdout, sink, 1 << 20)
                if sink is not f:
                    sink.close()
                if save.wait() != 0:
                    raise RuntimeError(f"docker save {art.image} failed")
        finally:
            sh("docker", "rmi", art.image, check=False)  # 'images get' must load it from the mirror
        served = self._serve(art.name, out)
        served["loaded_size"] = int(sh("docker", "image", "inspect", "-f", "{{.Size}}", mini).stdout.strip())
        return served

    def pushed(self, art: Any, src: Any) -> dict[str, Any]:
        """The mini image (or slim replica) pushed to the local registry under the upstream repository's mirror path."""
        mini = self._mini_for(art.image)
        with upstream_tags():
            return self._pushed(art, src, mini)

    def _pushed(self, art: Any, src: Any, mini: str) -> dict[str, Any]:
        ref = src.url
        repo_ref = ref.split("@")[0]
        if ":" not in repo_ref.rsplit("/", 1)[-1]:
            repo_ref += ":latest"  # a digest-only reference: push under a tag, pull by the new digest
        target = mirror_ref(repo_ref, self.registry)
        sh("docker", "tag", mini, target)
        out = sh("docker", "push", target).stdout
        sh("docker", "rmi", target, check=False)
        m = re.search(r"digest: (sha256:[0-9a-f]{64})", out)
        if not m:
            raise RuntimeError(f"docker push {target} reported no digest")
        sh("docker", "rmi", art.image, check=False)  # 'images get' must pull it
        new = dict(src.model_dump(exclude_none=True), mirror="rehearsal-registry")
        size = int(sh("docker", "image", "inspect", "-f", "{{.Size}}", mini).stdout.strip())
        result: dict[str, Any] = {"size": size, "loaded_size": size} if art.size or art.loaded_size else {}
        if "@" in ref:  # a pinned digest: the replica's digest replaces it, in the source and the artifact
            new["url"] = f"{ref.split('@')[0]}@{m.group(1)}"
            result["sha256"] = m.group(1).split(":")[1]
        self.lock.record(Pin(art.name, digest=f"{ref.split('@')[0].rsplit(':', 1)[0] if '@' not in ref else ref.split('@')[0]}@{m.group(1)}",
                             mirror="rehearsal-registry"))
        result["sources"] = [new]
        return result

    def data(self, site: str, art: Any) -> dict[str, Any]:
        out = self.mirror / art.name
        build = DATA.get(art.name)
        if build is None:
            raise RuntimeError(f"no replica for the data artifact {art.name} of {site}: add one to DATA in {__file__}")
        build(self, site, art, out)
        return self._serve(art.name, out)

    def cp_out(self, image: str, path: str, into: Path) -> Path:
        """Copy ``path`` out of ``image`` into the directory ``into`` (docker cp keeps modes)."""
        c = sh("docker", "create", image).stdout.strip()
        try:
            into.mkdir(parents=True, exist_ok=True)
            sh("docker", "cp", f"{c}:{path}", str(into))
        finally:
            sh("docker", "rm", "-v", c, check=False)  # -v: the image's declared VOLUMEs made anonymous volumes
        return into / Path(path).name


def _tar(out: Path, members: dict[str, bytes], gz: bool = False, tree: tuple[Path, str] | None = None) -> None:
    with tarfile.open(out, "w:gz" if gz else "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        if tree:
            tar.add(tree[0], arcname=tree[1])


def _volume_tar(r: Replicas, site: str, art: Any, out: Path) -> None:
    """A tar whose entries sit under the upstream prefixes of the extract mapping (one file per volume)."""
    dest = art.extract.destination
    assert isinstance(dest, dict), art.name
    _tar(out, {f"{prefix}/REPLICA": f"envctl rehearsal replica of {art.name}\n".encode() for prefix in dest}
         | {f"{prefix}/PG_VERSION": b"15\n" for prefix in dest if "nominatim-flatnode" not in prefix})


def _osm_dump(r: Replicas, site: str, art: Any, out: Path) -> None:
    env = r.cat.site(site).services["nominatim"].env
    _tar(out, {Path(env["PBF_PATH"]).name: b"replica pbf\n", Path(env["IMPORT_WIKIPEDIA"]).name: gzip.compress(b"-- replica\n")})


def _osrm(r: Replicas, site: str, art: Any, out: Path) -> None:
    weights = {"car": "routability", "bike": "cyclability", "foot": "duration"}  # the OSRM profiles' weight names
    files = {}
    for profile, weight in weights.items():
        files[f"{profile}/us-northeast-latest.osrm.properties"] = json.dumps({"weight_name": weight}).encode()
        files[f"{profile}/us-northeast-latest.osrm"] = b"replica\n"
    _tar(out, files)


def _website(r: Replicas, site: str, art: Any, out: Path) -> None:
    image = r.cat.site(site).services["web"].flavors["mini"].image
    app = r.cp_out(image, "/app", r.work / "tmp-website")
    _tar(out, {}, gz=True, tree=(app, "openstreetmap-website"))
    shutil.rmtree(app.parent)


def _zim(r: Replicas, site: str, art: Any, out: Path) -> None:
    image = r.cat.site(site).services["web"].flavors["mini"].image
    got = r.cp_out(image, f"{SEED}/data/{art.name}", r.work / "tmp-zim")  # the ZIM the mini image seeds /data with
    got.rename(out)
    shutil.rmtree(got.parent)


def _classifieds_zip(r: Replicas, site: str, art: Any, out: Path) -> None:
    image = r.cat.site(site).services["db"].flavors["mini"].image
    sql = r.cp_out(image, f"{SEED}/docker-entrypoint-initdb.d/osclass_craigslist.sql", r.work / "tmp-sql")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(sql, "classifieds_docker_compose/mysql/osclass_craigslist.sql")
        z.writestr("classifieds_docker_compose/docker-compose.yml", "# replica\n")
    shutil.rmtree(sql.parent)


DATA: dict[str, Callable[[Replicas, str, Any, Path], None]] = {
    "wikipedia_en_all_maxi_2022-05.zim": _zim,
    "osm_tile_server.tar": _volume_tar,
    "nominatim_volumes.tar": _volume_tar,
    "osm_dump.tar": _osm_dump,
    "osrm_routing.tar": _osrm,
    "openstreetmap-website.tar.gz": _website,
    "classifieds_docker_compose.zip": _classifieds_zip,
}

# The only keys of a full-flavor artifact the rehearsal may change.
OVERRIDABLE = {"sources", "size", "loaded_size", "sha256"}  # sizes are estimates; the rest is what a mirror changes


def rehearsal_catalog(r: Replicas, sites: list[str], out: Path) -> None:
    raw = yaml.safe_load(BUILTIN.read_text())
    original = copy.deepcopy(raw)
    for name in sites:
        spec = r.cat.site(name)
        flavor = spec.flavors.get(FLAVOR)
        for i, art in enumerate(flavor.artifacts if flavor else ()):
            entry = raw["sites"][name]["flavors"][FLAVOR]["artifacts"][i]
            assert entry["name"] == art.name
            if art.kind == "data":
                entry.update(r.data(name, art))
            elif art.sources and art.sources[0].kind == "registry":
                entry.update(r.pushed(art, art.sources[0]))
            else:
                entry.update(r.tarball(art))
            log(f"replica of {name}/{art.name} ready")
    # Nothing but artifact sources and pins differs from the built-in catalog.
    for name, site in raw["sites"].items():
        for i, entry in enumerate(((site.get("flavors") or {}).get(FLAVOR) or {}).get("artifacts") or []):
            before = original["sites"][name]["flavors"][FLAVOR]["artifacts"][i]
            for key in set(entry) | set(before):
                if key not in OVERRIDABLE:
                    assert entry.get(key) == before.get(key), (name, key)
            site["flavors"][FLAVOR]["artifacts"][i] = before | {k: v for k, v in entry.items() if k in OVERRIDABLE}
        site_copy = {k: v for k, v in site.items() if k != "flavors"}
        assert site_copy == {k: v for k, v in original["sites"][name].items() if k != "flavors"}, name
    out.write_text(yaml.safe_dump(raw, sort_keys=False))


# -- driving the flavor ----------------------------------------------------------------------

@dataclass
class SiteRun:
    site: str
    ok: bool = True
    why: str = ""
    phases: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        t = " ".join(f"{k} {v:.1f}s" for k, v in self.phases.items())
        extra = f"  ({', '.join(self.notes)})" if self.notes else ""
        return f"{self.site:<15} {'PASS' if self.ok else 'FAIL'}  {t}{extra}" + (f"  -- {self.why}" if self.why else "")


class Driver:
    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work, self.env = work, env
        self.auth = work / "auth"

    def envctl(self, *args: str, json_out: bool = False, timeout: float = 1800) -> tuple[int, Any, str]:
        argv = [sys.executable, "-m", "envctl", *args] + (["--json"] if json_out else [])
        p = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout, cwd=self.work)
        data: Any = None
        if json_out:  # the last JSON document printed (progress events may come first, one per line)
            dec, text, pos = json.JSONDecoder(), p.stdout, 0
            while True:
                start = min((i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0), default=-1)
                if start < 0:
                    break
                try:
                    data, pos = dec.raw_decode(text, start)
                except ValueError:
                    pos = start + 1
        return p.returncode, data, (p.stderr.strip() or p.stdout.strip())[-800:]

    def step(self, run: SiteRun, phase: str, *args: str, expect: int | None = 0, json_out: bool = False) -> Any:
        t = time.monotonic()
        rc, data, text = self.envctl(*args, json_out=json_out)
        run.phases[phase] = run.phases.get(phase, 0.0) + time.monotonic() - t
        if expect is not None and rc != expect:
            raise RuntimeError(f"{phase}: 'envctl {' '.join(args)}' exited {rc} (expected {expect}): {text}")
        return data

    def count_marks(self, run: SiteRun, w: Write) -> int:
        svc = ["--service", w.service] if w.service else []
        rc, _, text = self.envctl("exec", *svc, "-i", INSTANCE, run.site, "--", *w.count)
        if rc != 0:
            raise RuntimeError(f"counting the rehearsal's write failed: {text}")
        return int(text.strip().splitlines()[-1])

    def site(self, name: str, catalog: Any, shared: set[str]) -> SiteRun:
        spec = catalog.site(name)
        mine = {a.image for a in spec.flavors[FLAVOR].artifacts if a.image} & shared
        if not mine:
            return self._site(name, catalog)
        with upstream_tags():  # another rehearsal may use or have left these tags: 'images get' must fetch them
            for image in sorted(mine):
                sh("docker", "rmi", image, check=False)
            return self._site(name, catalog)

    def shape(self, run: SiteRun, spec: Any) -> None:
        """The slim replica as envctl runs it, seen from inside: env-ctrl switched as the site's env says,
        GitLab's nginx port rewritten to the public port (the replica's reconfigure refuses a mismatch)."""
        i = ["-i", INSTANCE]
        t = time.monotonic()
        entry = spec.entry_service
        rc, _, text = self.envctl("exec", *i, run.site, "--", "python3", "/usr/local/lib/wa-env-ctrl/env_ctrl.py", "probe")
        if rc != 0:
            raise RuntimeError(f"shape: probing env-ctrl failed: {text}")
        off = entry.env.get("WA_ENV_CTRL_ENABLE") == "false"
        got = text.strip().splitlines()[-1]
        if off and got != "off":
            raise RuntimeError(f"shape: env-ctrl answers although WA_ENV_CTRL_ENABLE=false: {got[:200]}")
        if not off and not (got.startswith("{") and json.loads(got).get("healthy")):
            raise RuntimeError(f"shape: env-ctrl should serve a healthy /status on 8877: {got[:200]}")
        run.notes.append("env-ctrl off" if off else "env-ctrl on")
        if run.site == "gitlab":
            rc, _, text = self.envctl("exec", *i, run.site, "--", "grep", "^nginx\\['listen_port'\\]", "/etc/gitlab/gitlab.rb")
            port = next(iter(spec.public_ports().values())) + OFFSET
            if rc != 0 or text.strip() != f"nginx['listen_port'] = {port}":
                raise RuntimeError(f"shape: gitlab.rb's listen_port is not the public port {port}: {text.strip()[:200]}")
            run.notes.append(f"listen_port {port}")
        run.phases["shape"] = time.monotonic() - t

    def _site(self, name: str, catalog: Any) -> SiteRun:
        run = SiteRun(name)
        spec = catalog.site(name)
        i = ["-i", INSTANCE]
        try:
            got = self.step(run, "get", "images", "get", name, "--flavor", FLAVOR, *i, json_out=True) or []
            for art in spec.flavors[FLAVOR].artifacts if FLAVOR in spec.flavors else ():
                res = next((g for g in got if g.get("name") == art.name), None)
                # nothing was there before: every artifact must really come from the mirror or registry
                if res is None or res["action"] not in ("pulled", "loaded", "downloaded", "extracted"):
                    raise RuntimeError(f"get: {art.name} was not fetched ({res and res['action']})")
                if art.extract is not None and not res.get("extracted"):
                    raise RuntimeError(f"get: {art.name} was not unpacked")
            self.step(run, "up", "up", name, "--flavor", FLAVOR, *i, "--port-offset", str(OFFSET),
                      "--auth-dir", str(self.auth))
            if any(img.startswith("am1n3e/webarena-verified-") for img in catalog.images_of(name, FLAVOR)):
                self.shape(run, spec)
            if spec.login:
                self.step(run, "login", "login", name, *i, "--out", str(self.auth), "--check")
                state = self.auth / f"{name}_state.json"
                if not state.exists() or (state.stat().st_mode & 0o777) != 0o600:
                    raise RuntimeError(f"login: {state} missing or not mode 0600")
            w = WRITES.get(name)
            if w is not None:
                svc = ["--service", w.service] if w.service else []
                self.step(run, "write", "exec", *svc, *i, name, "--", *w.write)
                if self.count_marks(run, w) != 1:
                    raise RuntimeError("write: the rehearsal's row change is not there")
                self.step(run, "verify", "verify", name, *i, expect=1)  # dirty: must be told apart
                self.step(run, "snapshot", "snapshot", "create", name, "--name", "rehearsal", *i)
                res = self.step(run, "reset", "reset", name, *i, "--auth-dir", str(self.auth), json_out=True)
                tiers = [r.get("tier") for r in (res if isinstance(res, list) else (res or {}).get("results", []))
                         if isinstance(r, dict)]
                run.notes.append(f"reset tier {'/'.join(t for t in tiers if t) or '?'}")
                self.step(run, "verify", "verify", name, *i)
                if self.count_marks(run, w) != 0:
                    raise RuntimeError("reset: the write survived")
                if spec.reset.inplace is not None:  # the spare-less tier, on this flavor's images (issue 39)
                    self.step(run, "write", "exec", *svc, *i, name, "--", *w.write)
                    res = self.step(run, "inplace", "reset", name, "--tier", "inplace", *i, "--auth-dir", str(self.auth),
                                    json_out=True)
                    rows = [r for r in (res if isinstance(res, list) else (res or {}).get("results", [])) if isinstance(r, dict)]
                    if [r.get("tier") for r in rows] != ["inplace"]:
                        raise RuntimeError(f"in place: the reset took tier {[r.get('tier') for r in rows]}")
                    self.step(run, "verify", "verify", name, *i)
                    if self.count_marks(run, w) != 0:
                        raise RuntimeError("in place: the write survived")
                    put = rows[0].get("restored") or "nothing"
                    run.notes.append("in place: " + (put if isinstance(put, str) else ", ".join(map(str, put)))[:80])
                self.step(run, "restore", "snapshot", "restore", name, "rehearsal", *i)
                if self.count_marks(run, w) != 1:
                    raise RuntimeError("snapshot restore: the snapshot's write is missing")
            else:
                self.step(run, "verify", "verify", name, *i)
            self.step(run, "health", "health", name, *i)
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            run.ok, run.why = False, str(exc).splitlines()[0][:400]
        finally:
            t = time.monotonic()
            rc, _, text = self.envctl("down", name, *i, "--volumes")
            run.phases["down"] = time.monotonic() - t
            if rc != 0 and run.ok:
                run.ok, run.why = False, f"down exited {rc}: {text}"
        return run


# -- main ------------------------------------------------------------------------------------------

def start_registry(work: Path) -> tuple[subprocess.Popen, str]:
    if not os.access(REGISTRY_BIN, os.X_OK):
        raise SystemExit(f"rehearse: {REGISTRY_BIN} is missing: run 'bash scripts/system-deps.sh' (apt-get install docker-registry)")
    port = free_port()
    cfg = work / "registry.yml"
    cfg.write_text(f"version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {work / 'registry'}}}, "
                   f"delete: {{enabled: true}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n")
    proc = subprocess.Popen([REGISTRY_BIN, "serve", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 200:
                return proc, f"127.0.0.1:{port}"
        except requests.RequestException:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("rehearse: docker-registry did not start")
        time.sleep(0.1)


def main() -> int:
    global INSTANCE, OFFSET, FLAVOR
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sites", nargs="*", help="sites to rehearse (default: all)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir and registry data")
    ap.add_argument("--json", action="store_true", help="one JSON object per site on stdout")
    ap.add_argument("--instance", default=INSTANCE, help=f"instance name (default {INSTANCE})")
    ap.add_argument("--port-offset", type=int, default=OFFSET, help=f"port offset of the sites (default {OFFSET})")
    ap.add_argument("--flavor", choices=FLAVORS, default=FLAVOR,
                    help="the flavor rehearsed: full (upstream's images) or slim (webarena-verified's); default full")
    args = ap.parse_args()
    INSTANCE, OFFSET, FLAVOR = args.instance, args.port_offset, args.flavor
    cat = load_catalog()
    sites = args.sites or [n for n, s in cat.sites.items() if FLAVOR in s.flavors]
    unknown = [s for s in sites if s not in cat.sites]
    if unknown:
        raise SystemExit(f"rehearse: unknown site(s) {', '.join(unknown)}; choose from {', '.join(cat.sites)}")
    lacking = [s for s in sites if FLAVOR not in cat.site(s).flavors]
    if lacking:
        raise SystemExit(f"rehearse: {', '.join(lacking)} has no {FLAVOR} flavor; choose from "
                         f"{', '.join(n for n, s in cat.sites.items() if FLAVOR in s.flavors)}")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="envctl-rehearse-", dir=os.environ.get("ENVCTL_REHEARSE_DIR")))
    (work / "data").mkdir()
    log(f"{FLAVOR} flavor; instance {INSTANCE}, port offset {OFFSET}; work dir {work}")
    sh(sys.executable, "-m", "envctl", "images", "build", "--flavor", "mini", capture=False)
    registry_proc, registry = start_registry(work)
    server = FaultServer()
    server.__enter__()
    runs: list[SiteRun] = []
    env = {**os.environ, "ENVCTL_CATALOG": str(work / "sites.yaml"), "ENVCTL_DATA_DIR": str(work / "data"),
           "ENVCTL_STATE_DIR": str(work / "state"), "ENVCTL_REGISTRY_MIRROR": registry, "ENVCTL_INSTANCE": INSTANCE}
    env.pop("ENVCTL_DISK_BUDGET_BYTES", None)
    driver = Driver(work, env)
    replicas: Replicas | None = None
    try:
        t = time.monotonic()
        replicas = Replicas(work, server, registry)
        rehearsal_catalog(replicas, sites, work / "sites.yaml")
        log(f"mirror and registry ready in {time.monotonic() - t:.0f}s "
            f"({sum(Path(p).stat().st_size for p in server.paths.values()) / 1e9:.2f} GB of files)")
        rehearsed = load_catalog(work / "sites.yaml")
        shared = shared_images(cat)
        for name in sites:
            run = driver.site(name, rehearsed, shared)
            runs.append(run)
            print(json.dumps({"site": run.site, "ok": run.ok, "why": run.why, "phases": run.phases, "notes": run.notes})
                  if args.json else run.line(), flush=True)
    finally:
        driver.envctl("down", "-i", INSTANCE, "--volumes")
        driver.envctl("snapshot", "rm", "rehearsal", "-i", INSTANCE)
        server.__exit__()
        registry_proc.terminate()
        registry_proc.wait(10)
        if replicas is not None:  # the upstream-named tags were made here; the mini images and slim replicas stay
            with upstream_tags():
                for image in {a.image for s in sites for a in cat.site(s).flavors[FLAVOR].artifacts if a.image}:
                    if not image.startswith("envctl"):
                        sh("docker", "rmi", image, check=False)
            # what 'images get' pulled through the mirror keeps the mirror's name too
            listed = sh("docker", "images", "--digests", "--format", "{{.Repository}} {{.Tag}} {{.Digest}}").stdout
            for repo, tag, digest in (line.split() for line in listed.splitlines() if line.count(" ") == 2):
                if repo.startswith(registry + "/"):
                    sh("docker", "rmi", f"{repo}:{tag}" if tag != "<none>" else f"{repo}@{digest}", check=False)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    left = [v for v in sh("docker", "volume", "ls", "-q").stdout.split() if v.startswith(f"{INSTANCE}-")]
    if left:  # 'down --volumes' must remove every volume the instance made, filled by an extract or not
        log(f"FAIL: volumes left after 'down --volumes': {', '.join(left)}")
        sh("docker", "volume", "rm", *left, check=False)
    failed = [r for r in runs if not r.ok]
    log(f"{len(runs) - len(failed)}/{len(sites)} sites passed the {FLAVOR}-flavor rehearsal in {time.monotonic() - started:.0f}s")
    return 1 if failed or left or len(runs) != len(sites) else 0


if __name__ == "__main__":
    sys.exit(main())
