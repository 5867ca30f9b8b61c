"""Run a task set: login state, resets, the agent, the evaluators, a negative control; typed results.

Tasks are grouped by the sites they touch (tasks sharing a site stay in one group, in file order);
groups run in parallel threads, each with its own Playwright and browser, since tasks on disjoint
sites cannot interfere. Every run includes a negative control: a copy of a runnable read-only task
whose references are deliberately wrong, which must score 0 on the very same trajectory.
"""
from __future__ import annotations

import copy
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from envctl.errors import EnvctlError, need_extra
from envctl.smoke.agent import RecipeError, ReferenceAgent, Trajectory, parse_recipe
from envctl.smoke.evaluators import Check, Evaluation, evaluate, program_html_checks, Helpers
from envctl.smoke.report import write_reports
from envctl.smoke.results import SmokeResult, TaskResult
from envctl.smoke.tasks import Task, task_from_config
import envctl.smoke.verified as verified
import envctl.smoke.verified_run as verified_run

if TYPE_CHECKING:  # pragma: no cover
    from playwright.sync_api import Browser

    from envctl.catalog import Catalog
    from envctl.smoke.judge import Judge

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
NEGATIVE_SUFFIX = ":negative-control"
WRONG_ANSWER = "envctl negative control: deliberately wrong answer"
WRONG_CONTENT = "envctl-negative-control-3f9c1e"
DEFAULT_VIEWPORT = {"width": 1280, "height": 720}

ResetFn = Callable[[list[str]], None]
ProgressFn = Callable[["TaskResult"], None]


# ---------------------------------------------------------------- planning

def negative_control(tasks: list[Task], *, needs_recipe: bool = True) -> Task | None:
    """A wrong-reference copy of the first task that is runnable, read-only and reset-free."""
    for t in tasks:
        if (needs_recipe and _recipe_of(t) is None) or t.expect_fail or t.recheck_after_reset or t.require_reset:
            continue
        cfg = copy.deepcopy(t.config)
        ev = cfg["eval"]
        if "string_match" in t.eval_types:
            ev["reference_answers"] = {"exact_match": WRONG_ANSWER}
        if "url_match" in t.eval_types:
            origin = t.start_urls[0].split("/")[:3]
            ev["reference_url"] = "/".join(origin) + "/" + WRONG_CONTENT
        if "program_html" in t.eval_types:
            for target in ev.get("program_html") or []:
                target["required_contents"] = {"must_include": [WRONG_CONTENT]}
        cfg["task_id"] = f"{t.task_id}{NEGATIVE_SUFFIX}"
        # the intent stays as it is: an LLM agent must not be told that this run is a control
        cfg["envctl_expect_fail"] = True
        return task_from_config(cfg, {})
    return None


def site_groups(tasks: list[Task], coupled: list[tuple[str, str]] | None = None) -> list[list[Task]]:
    """Partition tasks into groups whose site sets are disjoint (union-find), keeping file order.

    ``coupled`` pairs (the catalog's ``coupled_with``) always land in one group: a reset of one
    site of a pair can disturb the other's tasks."""
    if coupled is None:
        from envctl.catalog import load_catalog

        coupled = load_catalog().coupled()
    parent: dict[str, str] = {}
    for a, b in coupled:
        parent[b] = a
        parent.setdefault(a, a)

    def find(s: str) -> str:
        while parent.setdefault(s, s) != s:
            s = parent[s]
        return s

    for t in tasks:
        for s in t.sites[1:]:
            parent[find(s)] = find(t.sites[0])
        if t.sites:
            find(t.sites[0])
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        groups.setdefault(find(t.sites[0]) if t.sites else "-", []).append(t)
    return list(groups.values())


# ---------------------------------------------------------------- execution

@dataclass
class _Context:
    env: dict[str, str]
    auth_dir: Path | None
    reset: ResetFn | None
    judge: Judge | None
    agent: str
    screenshots: bool
    rest_admin: tuple[str, str] | None = None
    reset_lock: threading.Lock = field(default_factory=threading.Lock)
    verified: verified_run.VerifiedRun | None = None  # webarena-verified's tasks (envctl.smoke.verified_run)


class _Failed(Exception):
    """Ends a task early with a fail or skip status."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def _recipe_of(task: Task) -> list[Any] | None:
    if task.recipe is not None:
        return task.recipe
    ref = task.config.get("reference_action_sequence") or {}
    if ref.get("action_set_tag") == "playwright" and ref.get("action_sequence"):
        return list(ref["action_sequence"])
    return None


def _new_context(browser: Browser, task: Task, ctx: _Context) -> Any:
    kwargs: dict[str, Any] = {"viewport": task.viewport or DEFAULT_VIEWPORT, "device_scale_factor": 1}
    if task.storage_state and task.storage_state_name:
        if ctx.auth_dir is None:
            raise _Failed("fail", f"task needs login state {task.storage_state_name} but no auth directory was given")
        path = ctx.auth_dir / task.storage_state_name
        if not path.is_file():
            raise _Failed("fail", f"login state {path} is missing; run `envctl login` for {'+'.join(task.sites)}")
        kwargs["storage_state"] = str(path)
    return browser.new_context(**kwargs)


def _do_reset(task: Task, ctx: _Context, why: str) -> None:
    if ctx.reset is None:
        raise _Failed("skip", f"needs a reset ({why}) but no reset is available")
    with ctx.reset_lock:
        try:
            ctx.reset(list(task.sites))
        except Exception as exc:
            raise _Failed("fail", f"reset of {', '.join(task.sites)} ({why}) failed: {exc}") from exc


def _state_checks(browser: Browser, task: Task, ctx: _Context, phase: str) -> list[Check]:
    """Score the fixed-URL program_html targets on a fresh context; passes when the task would FAIL.

    Before acting and after a reset the task's own check must score 0 as a whole (product over
    targets), so a ``must_exclude`` target that holds in the pristine state does not count as a change.
    """
    targets = [t for t in task.eval.get("program_html") or [] if t.get("url", "last") != "last"]
    if not targets:
        return [Check(phase, None, "no fixed-URL program_html target to re-check")]
    context = _new_context(browser, task, ctx)
    try:
        page = context.new_page()
        page.goto(task.start_urls[0], wait_until="load")
        raw = Evaluation(program_html_checks(targets, page, helpers=Helpers(ctx.env, rest_admin=ctx.rest_admin)))
    finally:
        context.close()
    details = "; ".join(f"{c.name}={c.score}" for c in raw.checks)
    if raw.score is None:
        return [Check(phase, None, f"could not score the state: {raw.reason}")]
    if raw.score == 0:
        return [Check(phase, 1.0, f"change absent ({details})")]
    return [Check(phase, 0.0, f"change PRESENT: {details}; " + "; ".join(c.detail for c in raw.checks))]


def _run_agent(browser: Browser, task: Task, ctx: _Context, recipe: list[Any] | None) -> tuple[Trajectory, Any, Any]:
    context = _new_context(browser, task, ctx)
    try:
        if ctx.agent == "llm":
            from envctl.smoke.llm_agent import LLMAgent

            llm = LLMAgent.from_env()
            page = ReferenceAgent(screenshots=ctx.screenshots).open_tabs(context, task.start_urls)
            traj, page = llm.run(task, page, screenshots=ctx.screenshots)
        else:
            agent = ReferenceAgent(screenshots=ctx.screenshots)
            page = agent.open_tabs(context, task.start_urls)
            traj, page = agent.run(task.task_id, recipe or [], page)
        return traj, page, context
    except Exception:
        context.close()
        raise


def run_task(browser: Browser, task: Task, ctx: _Context) -> TaskResult:
    """One task end to end: [reset] -> [pristine check] -> agent -> evaluate -> [reset -> re-check]."""
    if task.format == verified.FORMAT and ctx.verified is not None:
        return verified_run.run_task(browser, task, ctx.verified)
    started = time.monotonic()
    result = TaskResult(task_id=task.task_id, sites=list(task.sites), intent=task.intent, status="fail",
                        reason="", negative_control=task.expect_fail, verified=task.verified)
    checks: list[Check] = []
    try:
        recipe = _recipe_of(task)
        if ctx.agent == "reference":
            if recipe is None:
                raise _Failed("skip", "no recipe for the reference agent")
            try:
                parse_recipe(recipe)
            except RecipeError as exc:
                raise _Failed("fail", f"bad recipe: {exc}") from exc
        if task.require_reset:
            _do_reset(task, ctx, "require_reset")
        if task.recheck_after_reset:
            checks += _state_checks(browser, task, ctx, "before")
            if any(c.score == 0 for c in checks):
                raise _Failed("fail", "state is not pristine before acting: " +
                              "; ".join(c.detail for c in checks if c.score == 0))
        traj, page, context = _run_agent(browser, task, ctx, recipe)
        try:
            result.steps, result.answer, result.final_url = traj.steps, traj.answer, traj.final_url
            if traj.error and task.expect_fail:
                raise _Failed("fail", f"negative control inconclusive, the agent failed: {traj.error}")
            evaluation = evaluate(task, traj.answer, page, env=ctx.env, judge=ctx.judge)
        finally:
            context.close()
        if task.expect_fail:
            said_no = all(c.score == 0 for c in evaluation.checks)
            checks += [Check(f"negative.{c.name}", None if c.score is None else 1.0 - c.score, c.detail)
                       for c in evaluation.checks]
            result.score = evaluation.score
            raise _Failed("pass" if said_no else "fail",
                          "evaluator rejected the wrong references" if said_no
                          else "evaluator ACCEPTED a deliberately wrong reference")
        checks += evaluation.checks
        result.score = evaluation.score
        if traj.error and evaluation.status != "pass":
            raise _Failed("fail", traj.error)
        if evaluation.status != "pass":
            raise _Failed(evaluation.status, evaluation.reason)
        if task.recheck_after_reset:
            _do_reset(task, ctx, "undo the change")
            after = _state_checks(browser, task, ctx, "after_reset")
            checks += after
            bad = [c for c in after if c.score == 0]
            if bad:
                raise _Failed("fail", "change survived the reset: " + "; ".join(c.detail for c in bad))
        raise _Failed("pass", "all checks passed" + (" (acted, reset, change gone)" if task.recheck_after_reset else ""))
    except _Failed as end:
        result.status, result.reason = end.status, end.reason
    except EnvctlError as exc:
        result.status, result.reason = "fail", str(exc)
    except Exception as exc:  # a crash in one task must not hide the others' results
        result.status, result.reason = "fail", f"{type(exc).__name__}: {exc}"
    result.checks = [asdict(c) for c in checks]
    result.elapsed_s = round(time.monotonic() - started, 3)
    return result


def _run_group(group: list[Task], ctx: _Context, browser_path: str, on_done: Callable[[TaskResult], None]) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=CHROMIUM_ARGS, headless=True)
        try:
            for task in group:
                on_done(run_task(browser, task, ctx))
        finally:
            browser.close()


def _verified_dir(report_dir: Path | None) -> Path:
    """Where webarena-verified's files go: the report's folder, else a private temporary one."""
    if report_dir is not None:
        return Path(report_dir) / verified.FORMAT
    import tempfile

    return Path(tempfile.mkdtemp(prefix="envctl-smoke-verified-"))


def run_smoke(tasks: list[Task], *, env: dict[str, str], auth_dir: Path | None = None,
              reset: ResetFn | None = None, sites: list[str] | None = None, agent: str = "reference",
              report_dir: Path | None = None, browser_path: str = "/usr/bin/chromium",
              progress: ProgressFn | None = None, judge: Judge | None = None, max_parallel: int = 3,
              task_set: str = "", coupled: list[tuple[str, str]] | None = None,
              rest_admin: tuple[str, str] | None = None, catalog: Catalog | None = None,
              flavor: str = "mini") -> SmokeResult:
    """Run ``tasks`` (plus a negative control) against the sites in ``env``; write reports if asked.

    webarena-verified's tasks (``Task.format``) are judged by its own evaluators (envctl.smoke.verified_run),
    with the login headers of ``flavor`` and its files under ``report_dir/webarena-verified``."""
    need_extra("browser", "envctl smoke", "playwright")
    if agent not in ("reference", "llm"):
        raise EnvctlError(f"unknown agent {agent!r}", hint="use --agent reference or --agent llm")
    if agent == "llm":
        from envctl.smoke.llm_agent import LLMAgent

        LLMAgent.from_env()  # fails early with a hint when no endpoint is configured
    if not Path(browser_path).exists():
        raise EnvctlError(f"browser {browser_path} not found", hint="install Debian's chromium or pass browser_path")
    filled = [verified.task_from_entry(t.config, env) if t.format == verified.FORMAT else task_from_config(t.config, env)
              for t in tasks]
    if sites:
        filled = [t for t in filled if set(t.sites) <= set(sites)]
    ctx = _Context(env=env, auth_dir=auth_dir, reset=reset, judge=judge, agent=agent, rest_admin=rest_admin,
                   screenshots=report_dir is not None)
    theirs = [t for t in filled if t.format == verified.FORMAT]
    if theirs:
        if agent != "reference":
            raise EnvctlError("webarena-verified's tasks run with the reference agent only", hint="use --agent reference")
        from envctl.catalog import load_catalog

        ctx.verified = verified_run.VerifiedRun(catalog or load_catalog(), flavor, env, auth_dir,
                                                _verified_dir(report_dir), reset, screenshots=report_dir is not None,
                                                reset_lock=ctx.reset_lock)
    control = verified_run.negative_control(theirs, flavor) if theirs else \
        negative_control(filled, needs_recipe=agent == "reference")
    if control is not None:
        filled.insert(filled.index(next(t for t in filled if control.task_id.startswith(t.task_id + ":"))), control)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    done: dict[str, TaskResult] = {}
    lock = threading.Lock()

    def on_done(r: TaskResult) -> None:
        with lock:
            done[r.task_id] = r
            if progress:
                progress(r)

    groups = site_groups(filled, coupled)
    if groups:
        with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(groups)))) as pool:
            for f in [pool.submit(_run_group, g, ctx, browser_path, on_done) for g in groups]:
                f.result()
    results = [done[t.task_id] for t in filled]
    if control is None:
        results.append(TaskResult(task_id="negative-control", sites=[], intent="negative control",
                                  status="fail", reason="no runnable read-only task to build a negative control from",
                                  negative_control=True))
    result = SmokeResult(task_set=task_set, tasks=results, started_at=started_at,
                         wall_s=round(time.monotonic() - t0, 3))
    if report_dir is not None:
        write_reports(result, Path(report_dir))
        result.report_dir = str(report_dir)
    elif ctx.verified is not None:  # the temporary folder of webarena-verified's files
        import shutil

        shutil.rmtree(ctx.verified.out_dir, ignore_errors=True)
    return result
