"""Loading a task set of either benchmark's format: WebArena's ``test.raw.json`` tasks
(:mod:`envctl.smoke.tasks`) or webarena-verified's (:mod:`envctl.smoke.verified`)."""
from __future__ import annotations

from pathlib import Path

import envctl.smoke.verified as verified
from envctl.smoke.tasks import Task, TaskConfigError, check_access, load_configs, placeholders, read_set


def load_task_set(name_or_path: str | Path, env: dict[str, str] | None = None,
                  sites: list[str] | None = None) -> list[Task]:
    """Load a bundled set or file; keep tasks whose sites are all in ``sites`` (when given).

    Tasks are filled from ``env`` (harness variables such as ``SHOPPING``); with ``env=None``
    placeholders are left as they are (useful to list a set without an instance)."""
    configs, data = read_set(name_or_path)
    if not verified.is_verified_set(data, configs):
        return load_configs(name_or_path, configs, env, sites)
    try:
        for config in configs:  # envctl_access, as in WebArena's format (Task.access)
            check_access(config)
        return verified.load(configs, env if env is not None else {v: p for p, v in placeholders().items()}, sites)
    except TaskConfigError as exc:  # name the file (or bundled set) the bad task came from
        raise TaskConfigError(f"{name_or_path}: {exc.message}", hint=exc.hint) from None


__all__ = ["load_task_set"]
