"""Task configs in the WebArena format: loading bundled sets or files, filling placeholders.

A task-set file is a JSON list of upstream task configs (``config_files/test.raw.json`` entries) or an
object ``{"name": ..., "description": ..., "tasks": [...]}``. envctl's own additions live under keys
prefixed ``envctl_`` so an upstream harness ignores them:

- ``envctl_recipe``: the reference agent's steps (see :mod:`envctl.smoke.agent`);
- ``envctl_verified``: whether the recipe has been run against a real instance of the target flavor;
- ``envctl_recheck_after_reset``: state-changing task; its program_html targets must score 0 before
  acting and again after the sites are reset;
- ``envctl_expect_fail``: a negative control, the task passes only when the evaluator says no;
- ``envctl_access``: ``read`` (the task only reads a site's state) or ``write`` (it changes state a later task
  could see), as :mod:`envctl.smoke.classify` decides from the benchmark's fields (``scripts/classify_bundled.py``
  writes it into the bundled sets); :attr:`Task.access`.

Placeholders (``__SHOPPING__`` ...) are replaced by plain string replacement over the whole config,
as upstream's ``generate_test_data.py`` does, so reference answers and locators are filled too.
"""
from __future__ import annotations

import functools
import json
import os
import stat
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from envctl.catalog import load_catalog
from envctl.errors import EnvctlError


@functools.lru_cache(maxsize=None)
def placeholders() -> dict[str, str]:
    """Placeholder -> harness environment variable (``__SHOPPING__`` -> ``SHOPPING``), from the catalog."""
    return load_catalog().placeholders()


TAB_SEPARATOR = " |AND| "
BUNDLED_DIR = "tasks"
ACCESS = ("read", "write")  # envctl_access: who may share an instance (envctl.smoke.classify)


class TaskConfigError(EnvctlError):
    """A task set or task config is missing, malformed or needs an unset placeholder."""


@dataclass(frozen=True)
class Task:
    """One task config, placeholders filled. ``config`` keeps the full (filled) upstream dict."""

    task_id: str
    sites: tuple[str, ...]
    intent: str
    start_urls: tuple[str, ...]
    storage_state: str | None
    require_login: bool
    require_reset: bool
    eval: dict[str, Any]
    recipe: list[Any] | None
    verified: bool | None
    recheck_after_reset: bool
    expect_fail: bool
    viewport: dict[str, int] | None
    config: dict[str, Any] = field(repr=False)
    format: str = "webarena"  # or "webarena-verified" (envctl.smoke.verified: its tasks, its evaluators)

    @property
    def eval_types(self) -> list[str]:
        return list(self.eval.get("eval_types") or [])

    @property
    def access(self) -> str | None:
        """``read`` or ``write``, as the set's ``envctl_access`` says (None when it does not)."""
        value = self.config.get("envctl_access")
        return value if value in ACCESS else None

    @property
    def storage_state_name(self) -> str | None:
        """The file name of the login state (``./.auth/gitlab.reddit_state.json`` -> its base name)."""
        return Path(self.storage_state).name if self.storage_state else None


def check_access(config: dict[str, Any]) -> None:
    """A task's ``envctl_access``, when it has one, is ``read`` or ``write``."""
    if "envctl_access" in config and config["envctl_access"] not in ACCESS:
        raise TaskConfigError(f"task {str(config.get('task_id'))[:40]!r}: 'envctl_access' must be 'read' or 'write'",
                              hint="or leave it out ('envctl tasks classify --file F' says which)")


def bundled_sets() -> list[str]:
    """Names of the task sets shipped with envctl (``mini``, ``webarena-smoke`` ...)."""
    root = resources.files("envctl.smoke").joinpath(BUNDLED_DIR)
    return sorted(p.name[: -len(".json")] for p in root.iterdir() if p.name.endswith(".json"))


TASK_FILE_MAX = 64 << 20  # bytes; WebArena's whole test.raw.json is about 1 MB


def _read_task_file(path: Path) -> str:
    """A task file's text: a regular, readable, UTF-8 file of at most :data:`TASK_FILE_MAX` bytes,
    else one line naming it (a directory, a FIFO, a device, unreadable, not UTF-8, too large)."""
    hint = f"pass a readable JSON file or a bundled set: {', '.join(bundled_sets())}"
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise TaskConfigError(f"task file {path} does not exist", hint=hint) from None
    except OSError as exc:
        raise TaskConfigError(f"task file {path} cannot be read ({exc.strerror})", hint=hint) from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
        raise TaskConfigError(f"task file {path} is {kind}", hint=hint)
    if st.st_size > TASK_FILE_MAX:
        raise TaskConfigError(f"task file {path} is {st.st_size} bytes (at most {TASK_FILE_MAX})", hint="split it")
    try:  # O_NONBLOCK: a FIFO swapped in after the stat cannot hang the open
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise TaskConfigError(f"task file {path} is not a regular file", hint=hint)
            data = fh.read(TASK_FILE_MAX + 1)
    except OSError as exc:
        raise TaskConfigError(f"task file {path} cannot be read ({exc.strerror})", hint=hint) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskConfigError(f"task file {path} is not UTF-8 text (byte {exc.start})", hint="save it as UTF-8 JSON") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_task_set(name_or_path: str | Path) -> list[dict[str, Any]]:
    """The raw (unfilled) task configs of a bundled set name or a JSON file path."""
    return read_set(name_or_path)[0]


def read_set(name_or_path: str | Path) -> tuple[list[dict[str, Any]], Any]:
    """The raw task configs of a set, and the whole JSON document (whose 'format' may say whose tasks)."""
    path = Path(name_or_path)
    name = str(name_or_path)
    if "\0" in name or not name:
        raise TaskConfigError("--tasks is empty or contains a NUL byte", hint="pass a JSON file or a bundled set name")
    bundled = isinstance(name_or_path, str) and path.suffix != ".json" and "/" not in name and name in bundled_sets()
    if not bundled:
        if path.suffix != ".json" and not os.path.lexists(path):
            raise TaskConfigError(f"no bundled task set named {name!r} and no such file",
                                  hint=f"bundled sets: {', '.join(bundled_sets())}; or pass a path to a JSON file")
        text = _read_task_file(path)
        origin = f"task file {path}"
    else:
        text = resources.files("envctl.smoke").joinpath(BUNDLED_DIR, f"{name}.json").read_text(encoding="utf-8")
        origin = f"bundled set {name}"
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; NaN/Infinity; too deep
        first = str(exc).splitlines()[0] if isinstance(exc, ValueError) else "nested too deeply"
        raise TaskConfigError(f"{origin} is not valid JSON: {first}", hint="fix the JSON syntax") from None
    configs = data.get("tasks") if isinstance(data, dict) else data
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise TaskConfigError(f"{origin} must be a list of task configs or an object with a 'tasks' list",
                              hint="use the WebArena test.raw.json format")
    return configs, data


def fill_placeholders(config: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """Replace every ``__SITE__`` placeholder in the config (all strings, any depth) from ``env``."""
    text = json.dumps(config)
    for placeholder, var in placeholders().items():
        if placeholder in text:
            value = env.get(var)
            if not value:
                raise TaskConfigError(
                    f"task {config.get('task_id')} uses {placeholder} but {var} is not set",
                    hint=f"set {var} (e.g. from `envctl env`) or restrict the run with --sites")
            # json.dumps of the value escapes quotes/backslashes the same way as the document
            text = text.replace(placeholder, json.dumps(value.rstrip("/"))[1:-1])
    return json.loads(text)


def task_from_config(config: dict[str, Any], env: dict[str, str]) -> Task:
    """Validate one raw config and fill its placeholders."""
    for key in ("task_id", "sites", "start_url", "eval"):
        if key not in config:
            raise TaskConfigError(f"task config {config.get('task_id', '?')} lacks {key!r}",
                                  hint="every task needs task_id, sites, start_url and eval as in test.raw.json")
    tid = config["task_id"]
    shapes = (("task_id", (isinstance(tid, (str, int)) and not isinstance(tid, bool)), "a string or a whole number"),
              ("sites", isinstance(config["sites"], list) and all(isinstance(s, str) for s in config["sites"]),
               "a list of site names"),
              ("start_url", isinstance(config["start_url"], str), "a string"),
              ("eval", isinstance(config["eval"], dict) and isinstance(config["eval"].get("eval_types") or [], list),
               "an object with an eval_types list"))
    for key, ok, what in shapes:
        if not ok:
            raise TaskConfigError(f"task config {str(tid)[:40]!r}: {key!r} must be {what}",
                                  hint="use the WebArena test.raw.json format")
    check_access(config)
    filled = fill_placeholders(config, env)
    ev = filled["eval"]
    unknown = set(ev.get("eval_types") or []) - {"string_match", "url_match", "program_html", "page_image_query"}
    if unknown:
        raise TaskConfigError(f"task {config['task_id']}: unknown eval_types {sorted(unknown)}",
                              hint="use string_match, url_match or program_html")
    return Task(
        task_id=str(filled["task_id"]),
        sites=tuple(filled["sites"]),
        intent=filled.get("intent", ""),
        start_urls=tuple(u.strip() for u in filled["start_url"].split(TAB_SEPARATOR.strip()) if u.strip()),
        storage_state=filled.get("storage_state"),
        require_login=bool(filled.get("require_login", False)),
        require_reset=bool(filled.get("require_reset", False)),
        eval=ev,
        recipe=filled.get("envctl_recipe"),
        verified=filled.get("envctl_verified"),
        recheck_after_reset=bool(filled.get("envctl_recheck_after_reset", False)),
        expect_fail=bool(filled.get("envctl_expect_fail", False)),
        viewport=filled.get("viewport_size"),
        config=filled,
    )


def load_task_set(name_or_path: str | Path, env: dict[str, str] | None = None,
                  sites: list[str] | None = None) -> list[Task]:
    """Load a bundled set or file; keep tasks whose sites are all in ``sites`` (when given).

    Tasks are filled from ``env`` (harness variables such as ``SHOPPING``); with ``env=None``
    placeholders are left as they are (useful to list a set without an instance).
    """
    return load_configs(name_or_path, read_task_set(name_or_path), env, sites)


def load_configs(name_or_path: str | Path, configs: list[dict[str, Any]], env: dict[str, str] | None = None,
                 sites: list[str] | None = None) -> list[Task]:
    """:func:`load_task_set` of configs already read (``name_or_path`` names them in errors)."""
    if sites:
        wanted = set(sites)
        configs = [c for c in configs if set(c.get("sites", [])) <= wanted]
    if env is None:
        env = {var: ph for ph, var in placeholders().items()}
    ids = [str(c.get("task_id")) for c in configs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise TaskConfigError(f"{name_or_path}: duplicate task ids {dupes}", hint="give every task a unique task_id")
    try:
        return [task_from_config(c, env) for c in configs]
    except TaskConfigError as exc:  # name the file (or bundled set) the bad config came from
        raise TaskConfigError(f"{name_or_path}: {exc.message}", hint=exc.hint) from None
