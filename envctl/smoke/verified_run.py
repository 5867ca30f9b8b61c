"""Run webarena-verified tasks: the reference agent in a browser that records a HAR, the agent's final
answer in webarena-verified's shape, and webarena-verified's own evaluators (PyPI, unmodified).

Per task, in the CLI's layout under the run's folder (``<report>/webarena-verified/<task_id>/``):
``network.har`` (Playwright's recording; the login headers' values masked), ``agent_response.json``
(``{"task_type", "status", "retrieved_data", "error_details"}``) and ``eval_result.json`` (what the
evaluators said), next to ``config.json`` (the environment config, without credentials), so
``webarena-verified eval-tasks --config <report>/webarena-verified/config.json --output-dir
<report>/webarena-verified`` judges the same files again.

The browser logs in as a webarena-verified harness does: the headers file (``extra_headers.json``,
BrowserGym's ``PW_EXTRA_HEADERS``) is sent with every request, and a site without a header login on
the instance's flavor (GitLab) gets its cookies from the login state file of those sites.

A task whose flavor's data cannot answer it (the set's ``envctl_gaps``) is reported as ``gap`` with
why. A state-changing (mutate) task is followed by a reset of its sites, so the next task sees them
pristine. The run's negative control replays a read-only task and hands the evaluators a wrong answer
(retrieve) or the trace cut after its first request (navigate): they must say no.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import envctl.auth.headers as login_headers
from envctl.auth.files import state_name
from envctl.smoke.agent import RecipeError, ReferenceAgent, Trajectory, parse_recipe
from envctl.smoke.evaluators import Check
from envctl.smoke.results import TaskResult
from envctl.smoke.tasks import Task
from envctl.smoke.verified import config, gap, package_version

if TYPE_CHECKING:  # pragma: no cover
    from playwright.sync_api import Browser

    from envctl.catalog import Catalog

NEGATIVE_SUFFIX = ":negative-control"
WRONG_ANSWER = "envctl negative control: deliberately wrong answer"
VIEWPORT = {"width": 1280, "height": 720}
MASK = "***"


class _End(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass
class VerifiedRun:
    """What every webarena-verified task of a run shares: where, who, how to reset, the evaluator."""

    catalog: Catalog
    flavor: str
    env: dict[str, str]
    auth_dir: Path | None
    out_dir: Path
    reset: Callable[[list[str]], None] | None = None
    screenshots: bool = False
    reset_lock: threading.Lock = field(default_factory=threading.Lock)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _api: Any = None

    def __post_init__(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.out_dir / "config.json"
        self.config_path.write_text(json.dumps(config(self.catalog, self.env, self.flavor, credentials=False), indent=2))

    @property
    def headers(self) -> dict[str, str]:
        """The headers file's content, as BrowserGym loads ``$PW_EXTRA_HEADERS`` ({} when there is none)."""
        return login_headers.read(self.auth_dir / login_headers.HEADERS_FILE) if self.auth_dir else {}

    def evaluate(self, task_id: int, folder: Path) -> Any:
        """webarena-verified's ``WebArenaVerified.evaluate_task`` on the folder's two files (its own API)."""
        with self._lock:
            if self._api is None:
                package_version()  # one line naming the fix when the package is missing
                from webarena_verified.api import WebArenaVerified

                self._api = WebArenaVerified(config=self.config_path)
            return self._api.evaluate_task(task_id=task_id, agent_response=folder / "agent_response.json",
                                           network_trace=folder / "network.har")


def negative_control(tasks: list[Task], flavor: str) -> Task | None:
    """A copy of the first runnable task that changes nothing, to be judged with a wrong answer or trace."""
    for t in tasks:
        if t.recipe is None or t.expect_fail or gap(t, flavor) or t.eval.get("task_type") not in ("retrieve", "navigate"):
            continue
        from dataclasses import replace

        return replace(t, task_id=t.task_id + NEGATIVE_SUFFIX, expect_fail=True,
                       config={**t.config, "envctl_expect_fail": True})
    return None


def _context(browser: Browser, task: Task, run: VerifiedRun, har: Path) -> Any:
    """A browser context logged in as webarena-verified's harnesses are (headers; cookies where there are none)."""
    sent = run.headers
    cookie_sites = []
    for s in task.sites:
        site = run.catalog.sites.get(s)
        if site is None or site.login is None:
            continue
        h = site.header_on(run.flavor)
        if h is None:
            cookie_sites.append(s)
        elif h.header not in sent:
            raise _End("fail", f"{login_headers.HEADERS_FILE} has no {h.header} for {s}; run 'envctl login {s}'")
    kwargs: dict[str, Any] = {"viewport": VIEWPORT, "device_scale_factor": 1, "extra_http_headers": sent,
                              "record_har_path": str(har), "record_har_content": "embed"}
    if cookie_sites:
        path = (run.auth_dir or Path(".")) / state_name(cookie_sites)
        if not path.is_file():
            raise _End("fail", f"login state {path} is missing; run 'envctl login {' '.join(cookie_sites)}'")
        kwargs["storage_state"] = str(path)
    return browser.new_context(**kwargs)


def _mask_har(har: Path, names: list[str]) -> None:
    """Mask the login headers' values (passwords) in the recorded trace; the rest is left as recorded."""
    data = json.loads(har.read_text())
    low = {n.lower() for n in names}
    for entry in data.get("log", {}).get("entries", []):
        for h in entry.get("request", {}).get("headers", []):
            if str(h.get("name", "")).lower() in low:
                h["value"] = MASK
    har.write_text(json.dumps(data))


def _act(browser: Browser, task: Task, run: VerifiedRun, folder: Path) -> Trajectory:
    har = folder / "network.har"
    context = _context(browser, task, run, har)
    try:
        agent = ReferenceAgent(screenshots=run.screenshots)
        page = agent.open_tabs(context, list(task.start_urls))
        traj, _ = agent.run(task.task_id, task.recipe or [], page)
    finally:
        context.close()  # writes the HAR
    _mask_har(har, list(run.headers))
    return traj


def response(task: Task, traj: Trajectory) -> dict[str, Any]:
    """The reference agent's final answer in webarena-verified's shape (``FinalAgentResponse``)."""
    kind = str(task.config.get("envctl_task_type") or task.eval.get("task_type") or "retrieve")
    data: list[Any] | None = None
    if kind == "retrieve":
        sep = task.config.get("envctl_split")
        items: list[Any] = [i.strip() for i in traj.answer.split(sep)] if sep else [traj.answer.strip()]
        schema = next((e.get("results_schema") or {} for e in task.config["eval"]
                       if e.get("evaluator") == "AgentResponseEvaluator"), {})
        kind_of = (schema.get("items") or {}).get("type")
        if kind_of in ("number", "integer"):
            items = [(int if kind_of == "integer" else float)(i.replace(",", "").lstrip("$")) for i in items]
        data = items
    return {"task_type": kind.upper(), "status": "SUCCESS" if traj.ok else "UNKNOWN_ERROR",
            "retrieved_data": data, "error_details": traj.error}


def _judge(task: Task, result: Any) -> tuple[list[Check], str]:
    """Checks per evaluator, and why the task failed ('' when it passed)."""
    checks, why = [], []
    for e in result.evaluators_results:
        failed = [a.assertion_name + (f" ({'; '.join(a.assertion_msgs or ())})" if a.assertion_msgs else "")
                  for a in (e.assertions or ()) if a.status != "success"]
        detail = "; ".join(failed) or e.error_msg or str(e.status)
        checks.append(Check(e.evaluator_name, float(e.score), detail[:500]))
        if e.status != "success":
            why.append(f"{e.evaluator_name}: {detail[:300]}")
    status = str(getattr(result.status, "value", result.status))
    if status == "error":
        return checks, f"webarena-verified could not evaluate it: {result.error_msg}"
    return checks, "" if status == "success" else "; ".join(why) or status


def _negative(task: Task, folder: Path, answer: dict[str, Any]) -> dict[str, Any]:
    """The wrong answer (retrieve) or the cut trace (navigate) the negative control is judged with."""
    if task.eval.get("task_type") == "retrieve":
        return {**answer, "retrieved_data": [WRONG_ANSWER]}
    har = folder / "network.har"
    data = json.loads(har.read_text())
    data["log"]["entries"] = data["log"]["entries"][:1]
    har.write_text(json.dumps(data))
    return answer


def run_task(browser: Browser, task: Task, run: VerifiedRun) -> TaskResult:
    """One task: [gap] -> agent (HAR recorded) -> agent_response.json -> webarena-verified's evaluators -> [reset]."""
    started = time.monotonic()
    result = TaskResult(task_id=task.task_id, sites=list(task.sites), intent=task.intent, status="fail", reason="",
                        negative_control=task.expect_fail, verified=task.verified)
    checks: list[Check] = []
    try:
        why = gap(task, run.flavor)
        if why:
            raise _End("gap", f"the {run.flavor} data cannot answer it: {why}")
        if task.recipe is None:
            raise _End("skip", "no recipe for the reference agent")
        try:
            parse_recipe(task.recipe)
        except RecipeError as exc:
            raise _End("fail", f"bad recipe: {exc}") from exc
        tid = int(task.config["task_id"])
        folder = run.out_dir / ("negative-control" if task.expect_fail else "") / str(tid)
        folder.mkdir(parents=True, exist_ok=True)
        traj = _act(browser, task, run, folder)
        result.steps, result.answer, result.final_url = traj.steps, traj.answer, traj.final_url
        answer = response(task, traj)
        if task.expect_fail:
            answer = _negative(task, folder, answer)
        (folder / "agent_response.json").write_text(json.dumps(answer, indent=2))
        evaluated = run.evaluate(tid, folder)
        (folder / "eval_result.json").write_text(evaluated.model_dump_json(indent=2))
        result.score = float(evaluated.score)
        checks, failed = _judge(task, evaluated)
        if task.expect_fail:
            said_no = str(getattr(evaluated.status, "value", evaluated.status)) == "failure"
            raise _End("pass" if said_no else "fail", "evaluators rejected the wrong answer or cut trace" if said_no
                       else f"evaluators did NOT reject a wrong answer or cut trace ({evaluated.status})")
        if traj.error:
            raise _End("fail", traj.error + (f"; {failed}" if failed else ""))
        if failed:
            raise _End("fail", failed)
        if task.eval.get("task_type") == "mutate" and run.reset is not None:
            with run.reset_lock:
                try:
                    run.reset(list(task.sites))
                except Exception as exc:
                    raise _End("fail", f"passed, but the reset of {', '.join(task.sites)} after it failed: {exc}") from exc
        raise _End("pass", "webarena-verified's evaluators: success"
                   + (" (then reset)" if task.eval.get("task_type") == "mutate" and run.reset else ""))
    except _End as end:
        result.status, result.reason = end.status, end.reason
    except Exception as exc:  # a crash in one task must not hide the others' results
        result.status, result.reason = "fail", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    result.checks = [asdict(c) for c in checks]
    result.elapsed_s = round(time.monotonic() - started, 3)
    return result


__all__ = ["VerifiedRun", "run_task", "negative_control", "response", "NEGATIVE_SUFFIX"]
