"""Build the images envctl makes itself: the mini flavor, the homepage and the front proxy.

Each mini image is a site folder under ``envctl/images/mini/`` holding its ``Dockerfile``, its app
code (``app/``, copied into the image as the ``sites`` package) and its data (``files/``); the build
context is ``envctl/images/mini/`` itself, so every Dockerfile can COPY the shared ``miniweb``
package and its own folder. The front proxy lives in ``envctl/images/proxy/``.
Tags are ``envctl-mini/<dir>:<version>``: ``MINI_VERSION``, or the folder's ``VERSION`` file when it has
one (raised when an image's contract with the catalog changes, so a catalog and an image of another
version never meet on a shared engine: the catalog names the version it was written for). The classic builder is used because Debian's
docker.io ships no buildx plugin; BuildKit is not needed for these small images. Docker's layer cache makes an unchanged rebuild quick.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from envctl.errors import BuildFailed, ImageMissing
from envctl.backends.docker import ENGINE as dk

HERE = Path(__file__).resolve().parent
MINI_DIR = HERE / "mini"
MINI_VERSION = "1"
BASE_IMAGE = "debian:bookworm-slim"
PROXY_DIR = HERE / "proxy"


def _context_tag(directory: Path) -> str:
    """A tag naming the build context's content, so a changed context is never mistaken for a built one."""
    h = hashlib.sha256()
    for f in sorted(p for p in directory.rglob("*") if p.is_file()):
        h.update(f.relative_to(directory).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


# The proxy image is found by tag only (built when missing), so its tag follows its content.
PROXY_IMAGE = f"envctl/proxy:{_context_tag(PROXY_DIR)}"

# The node-data helper (a swarm node fetches, verifies and unpacks a site's data with it): envctl's modules it
# runs, copied into its build context; its tag follows their content and its Dockerfile's.
NODEDATA_DIR = HERE / "nodedata"
NODEDATA_FILES = ("__init__.py", "errors.py", "paths.py", "validate.py", "images/__init__.py", "images/fetch.py",
                  "images/extract.py", "images/nodedata.py")


def _nodedata_tag() -> str:
    h = hashlib.sha256((NODEDATA_DIR / "Dockerfile").read_bytes())
    for rel in NODEDATA_FILES:
        h.update(rel.encode() + b"\0" + (HERE.parent / rel).read_bytes() + b"\0")
    return h.hexdigest()[:12]


NODEDATA_IMAGE = f"envctl/node-data:{_nodedata_tag()}"


@dataclass(frozen=True)
class ImageBuild:
    name: str  # directory name, e.g. "magento"
    tag: str  # e.g. "envctl-mini/magento:1"
    dockerfile: Path
    context: Path


def _version(directory: Path) -> str:
    """The tag version of a mini image folder: its ``VERSION`` file's, else ``MINI_VERSION``."""
    f = directory / "VERSION"
    return f.read_text().strip() if f.is_file() else MINI_VERSION


def mini_builds() -> list[ImageBuild]:
    """Every mini image, base first (the others build FROM it)."""
    dirs = sorted(p.parent for p in MINI_DIR.glob("*/Dockerfile"))
    dirs.sort(key=lambda d: d.name != "base")
    return [
        ImageBuild(d.name, f"envctl-mini/{d.name}:{_version(d)}", d / "Dockerfile", MINI_DIR) for d in dirs
    ]


def proxy_build() -> ImageBuild:
    """The instances' front proxy (HAProxy from Debian's packages)."""
    return ImageBuild("proxy", PROXY_IMAGE, PROXY_DIR / "Dockerfile", PROXY_DIR)


def mini_tag(name: str) -> str:
    return f"envctl-mini/{name}:{_version(MINI_DIR / name)}"


def build(spec: ImageBuild, *, progress: Callable[[str], None] | None = None) -> float:
    """Build one image; returns seconds taken. Raises BuildFailed naming the image and the failing step."""
    if spec.name == "base" or "FROM debian:bookworm-slim" in spec.dockerfile.read_text():
        if not dk.image_exists(BASE_IMAGE):
            raise ImageMissing(
                f"base image {BASE_IMAGE} is missing (needed to build {spec.tag})",
                "run 'sudo scripts/docker-engine.sh', which pulls it or builds it with debootstrap",
            )
    start = time.monotonic()
    out = dk.build_lines(spec.context, spec.tag, file=spec.dockerfile,
                         labels={"org.envctl.built-by": "envctl", "org.envctl.image": spec.name})
    if out is not None:
        step = next((line for line in reversed(out) if "RUN" in line or "ERROR" in line), out[-1] if out else "")
        raise BuildFailed(
            f"building {spec.tag} failed at: {step.strip()[:300]}",
            f"re-run 'docker build -f {spec.dockerfile} {spec.context}' to see the whole log",
        )
    took = time.monotonic() - start
    if progress:
        progress(f"built {spec.tag} in {took:.1f}s")
    return took


def build_nodedata(*, progress: Callable[[str], None] | None = None) -> float:
    """Build the node-data helper image (its context: its Dockerfile and the envctl modules it runs); seconds."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="envctl-nodedata-") as tmp:
        ctx = Path(tmp)
        shutil.copy(NODEDATA_DIR / "Dockerfile", ctx / "Dockerfile")
        for rel in NODEDATA_FILES:
            (ctx / "envctl" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(HERE.parent / rel, ctx / "envctl" / rel)
        return build(ImageBuild("node-data", NODEDATA_IMAGE, ctx / "Dockerfile", ctx), progress=progress)


def build_for_sites(catalog: "object", sites: list[str], flavor: str, *,
                    progress: Callable[[str], None] | None = None) -> dict[str, float]:
    """Build every image the named sites need in ``flavor`` that envctl builds itself, plus the proxy."""
    dirs: list[str] = []
    for name in sites:
        site = catalog.site(name)  # type: ignore[attr-defined]
        for svc in site.services_for(flavor):
            b = site.services[svc].flavors[flavor].build
            if b and b not in dirs:
                dirs.append(b)
    specs = {s.name: s for s in mini_builds()}
    unknown = [d for d in dirs if d not in specs]
    if unknown:
        raise BuildFailed(f"no build context for {', '.join(unknown)} under {MINI_DIR}",
                          "check the catalog's 'build' entries")
    times: dict[str, float] = {}
    if dirs:
        times[specs["base"].tag] = build(specs["base"], progress=progress)
    for d in dirs:
        times[specs[d].tag] = build(specs[d], progress=progress)
    times[PROXY_IMAGE] = build(proxy_build(), progress=progress)
    return times
