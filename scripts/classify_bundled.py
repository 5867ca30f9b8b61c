#!/usr/bin/env python3
"""Write each bundled task set's ``envctl_access`` (``read`` / ``write``) as envctl's classifier decides it.

For every task of ``envctl/smoke/tasks/*.json`` (WebArena's format and webarena-verified's, whose tasks are the
installed package's), :func:`envctl.smoke.classify.classify_set` reads the benchmark's own fields (``eval``,
``require_reset``, ``intent``; webarena-verified's ``task_type``) and this sets the task's ``envctl_access`` to
the answer, leaving everything else as it is (the file keeps its layout). ``tests/test_classify.py`` checks that
the files agree with the classifier.

    python scripts/classify_bundled.py            # rewrite the files that differ
    python scripts/classify_bundled.py --check    # exit 1 if any file would change
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from envctl.smoke.classify import classify_set

ROOT = Path(__file__).resolve().parents[1]
SETS = ROOT / "envctl" / "smoke" / "tasks"


def updated(path: Path) -> tuple[str, str, list[str]]:
    """The file's text now, its text with every task's envctl_access set, and 'task: old -> new' per change."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    tasks = data["tasks"] if isinstance(data, dict) else data
    access = {c.task_id: c.access for c in classify_set(path)}
    changes = []
    for task in tasks:
        tid = str(task["task_id"])
        if task.get("envctl_access") != access[tid]:
            changes.append(f"{tid}: {task.get('envctl_access')} -> {access[tid]}")
            task["envctl_access"] = access[tid]
    new = json.dumps(data, indent=1, ensure_ascii=False) + ("\n" if text.endswith("\n") else "")
    return text, new, changes


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = 0
    for path in sorted(SETS.glob("*.json")):
        text, new, changes = updated(path)
        rel = path.relative_to(ROOT)
        if new == text:
            print(f"{rel}: up to date")
            continue
        stale += 1
        print(f"{rel}: {len(changes)} tasks {'would change' if check else 'updated'}: {', '.join(changes)}")
        if not check:
            path.write_text(new, encoding="utf-8")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
