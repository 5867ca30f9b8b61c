"""webarena-verified's formats: its environment config, and task sets of its tasks for the smoke suite.

webarena-verified (ServiceNow, PyPI ``webarena-verified``) revised WebArena's 812 tasks and evaluators:
a task names ``start_urls`` with placeholders (``__GITLAB__``) and a list of evaluators
(``AgentResponseEvaluator`` on the agent's final JSON answer, ``NetworkEventEvaluator`` on the
browser's network trace). Its evaluators run offline on two files per task, ``agent_response.json``
and ``network.har``; both its CLI (``webarena-verified eval-tasks --config F``) and its Python API
(``WebArenaVerified(config=Path(F))``) read the environment config :func:`config` builds.

**The environment config** (``envctl env --format webarena-verified``): ``{"environments":
{"__SITE__": {"urls": [...], "active_url_idx": 0, "use_header_login": bool, "credentials": {...}}}}``,
one entry per site of webarena-verified's seven. ``urls[0]`` is the URL start pages are rendered with
(the WebArena variable's value: ``/admin`` for the Magento admin, the landing page for Wikipedia);
the other entries are the same origin under the names a browser may also have used
(``localhost`` / ``127.0.0.1``, Wikipedia's bare origin), because webarena-verified maps trace URLs
back to placeholders by plain substring match and a URL it cannot map fails every network check.
``use_header_login`` is true where the site's images honour its header login on the instance's flavor
(nothing in webarena-verified 1.2.3 reads it; harnesses may); ``credentials`` are the benchmark
accounts (so the file is written 0600 and never printed unless asked for).

**Task sets** (``envctl smoke --tasks webarena-verified``): a JSON object ``{"format":
"webarena-verified", "tasks": [...]}`` whose entries are webarena-verified tasks, either whole (as
``webarena-verified dataset-get`` prints them) or by ``task_id`` alone; either way the task is the
installed package's own, unmodified (a whole entry that differs from it is refused: the evaluators
judge by the package's dataset). envctl's additions, under ``envctl_`` keys:

- ``envctl_recipe``: the reference agent's steps (:mod:`envctl.smoke.agent`); its ``stop`` answer is
  the retrieved data (``envctl_split``: a separator that makes it a list of several items);
- ``envctl_verified``: the recipe has been run against the flavor;
- ``envctl_gaps``: ``{flavor: why}``: that flavor's data cannot answer the task (written on the full
  data); the run reports the task as a ``gap`` with why, never as a silent skip.
"""
from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from envctl.errors import need_extra
from envctl.smoke.tasks import Task, TaskConfigError, fill_placeholders

if TYPE_CHECKING:  # pragma: no cover
    from envctl.catalog import Catalog

FORMAT = "webarena-verified"
# webarena_verified.types.task.WebArenaSite (1.2.3): the sites its config and tasks know
SITES = ("gitlab", "map", "reddit", "shopping_admin", "shopping", "wikipedia", "homepage")
TASK_FIELDS = ("sites", "task_id", "intent_template_id", "start_urls", "intent", "intent_template",
               "instantiation_dict", "eval", "revision")


def _aliases(url: str) -> list[str]:
    """The same origin under the other loopback name (a browser's trace may use either)."""
    parts = urlsplit(url)
    other = {"127.0.0.1": "localhost", "localhost": "127.0.0.1"}.get(parts.hostname or "")
    if other is None:
        return []
    netloc = other + (f":{parts.port}" if parts.port else "")
    return [urlunsplit(parts._replace(netloc=netloc))]


def config(catalog: Catalog, env: dict[str, str], flavor: str, *, credentials: bool = True) -> dict[str, Any]:
    """webarena-verified's environment config for the sites in ``env`` (WebArena variables -> URLs)."""
    envs: dict[str, Any] = {}
    for placeholder, var in catalog.placeholders().items():
        name = placeholder.strip("_").lower()
        url = (env.get(var) or "").rstrip("/")
        if name not in SITES or name not in catalog.sites or not url:
            continue
        urls = [url, *_aliases(url)]
        origin = urlunsplit(urlsplit(url)._replace(path="", query="", fragment=""))
        if origin != url and name != "shopping_admin":  # Wikipedia's landing page: pages elsewhere on the origin
            urls += [origin, *_aliases(origin)]
        entry: dict[str, Any] = {"urls": urls, "active_url_idx": 0,
                                 "use_header_login": catalog.site(name).header_on(flavor) is not None}
        account = catalog.site(name).account() if catalog.site(name).login else None
        if credentials and account is not None:
            entry["credentials"] = {"username": account.username, "password": account.password}
        envs[placeholder] = entry
    return {"environments": envs}


# -- the installed package's dataset --------------------------------------------------------------

def package_version() -> str:
    """The installed webarena-verified's version; MissingExtra naming the fix when it is missing."""
    from importlib import metadata

    need_extra("webarena-verified", "webarena-verified's tasks (judged by its own evaluators)", "webarena_verified")
    return metadata.version("webarena-verified")


@functools.lru_cache(maxsize=1)
def dataset() -> dict[int, dict[str, Any]]:
    """task_id -> task of the installed package's dataset (``assets/dataset/webarena-verified.json``)."""
    package_version()
    from importlib import resources

    text = resources.files("webarena_verified").joinpath("assets/dataset/webarena-verified.json").read_text("utf-8")
    return {int(t["task_id"]): t for t in json.loads(text)}


def is_verified_set(data: Any, configs: list[dict[str, Any]]) -> bool:
    """A task set in webarena-verified's format: declared so, or every task shaped as its tasks are."""
    if isinstance(data, dict) and "format" in data:
        if data["format"] not in ("webarena", FORMAT):
            raise TaskConfigError(f"task set format {str(data['format'])[:40]!r} is unknown",
                                  hint=f"use 'webarena' (test.raw.json tasks) or '{FORMAT}'")
        return bool(data["format"] == FORMAT)
    return bool(configs) and all(isinstance(c.get("start_urls"), list) and isinstance(c.get("eval"), list)
                                 for c in configs)


def _merged(entry: dict[str, Any], tasks: dict[int, dict[str, Any]]) -> dict[str, Any]:
    tid = entry.get("task_id")
    if not isinstance(tid, int) or isinstance(tid, bool):
        raise TaskConfigError(f"task {str(tid)[:40]!r}: a webarena-verified task_id is a whole number",
                              hint="use the task ids of webarena-verified's dataset (0-811)")
    if tid not in tasks:
        raise TaskConfigError(f"task {tid} is not in webarena-verified {package_version()}'s dataset",
                              hint="use the task ids of webarena-verified's dataset (0-811)")
    own = tasks[tid]
    for key in TASK_FIELDS:
        if key in entry and entry[key] != own[key]:
            raise TaskConfigError(f"task {tid}: '{key}' differs from webarena-verified {package_version()}'s dataset",
                                  hint="its evaluators judge by their own dataset: give the task as it is there, "
                                       "or by task_id alone")
    unknown = [k for k in entry if k not in TASK_FIELDS and not k.startswith("envctl_")]
    if unknown:
        raise TaskConfigError(f"task {tid}: unknown key {unknown[0]!r}",
                              hint="webarena-verified's task fields, and envctl's own under 'envctl_' keys")
    return {**own, **{k: v for k, v in entry.items() if k.startswith("envctl_")}}


def task_from_entry(entry: dict[str, Any], env: dict[str, str]) -> Task:
    """One set entry merged with the package's task, start URLs filled from ``env``."""
    merged = _merged(entry, dataset()) if "envctl_format" not in entry else entry
    # the start pages and envctl's recipe are filled; the evaluators' expectations stay as the package has them
    starts = fill_placeholders({"task_id": merged["task_id"], "start_urls": list(merged["start_urls"]),
                                "recipe": merged.get("envctl_recipe")}, env)
    expected = next((e.get("expected") or {} for e in merged["eval"] if e.get("evaluator") == "AgentResponseEvaluator"), {})
    return Task(task_id=str(merged["task_id"]), sites=tuple(merged["sites"]), intent=merged["intent"],
                start_urls=tuple(u.rstrip("/") for u in starts["start_urls"]), storage_state=None,
                require_login=True, require_reset=False, eval={"task_type": str(expected.get("task_type", "")).lower()},
                recipe=starts["recipe"], verified=merged.get("envctl_verified"),
                recheck_after_reset=False, expect_fail=bool(merged.get("envctl_expect_fail", False)),
                viewport=None, config={**merged, "envctl_format": FORMAT}, format=FORMAT)


def load(configs: list[dict[str, Any]], env: dict[str, str], sites: list[str] | None) -> list[Task]:
    """A webarena-verified task set's tasks (those whose sites are all in ``sites``, when given)."""
    tasks = [task_from_entry(c, env) for c in configs]
    ids = [t.task_id for t in tasks]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise TaskConfigError(f"duplicate task ids {dupes}", hint="give every task once")
    return [t for t in tasks if not sites or set(t.sites) <= set(sites)]


def gap(task: Task, flavor: str) -> str | None:
    """Why ``flavor``'s data cannot answer ``task`` (the set's ``envctl_gaps``), or None."""
    gaps = task.config.get("envctl_gaps") or {}
    why = gaps.get(flavor) if isinstance(gaps, dict) else None
    return str(why) if why else None


__all__ = ["FORMAT", "SITES", "config", "dataset", "package_version", "is_verified_set", "load", "task_from_entry",
           "gap"]
