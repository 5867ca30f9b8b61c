"""The reference agent: replays a task's scripted recipe in Playwright and records the trajectory.

A recipe is a list of id-free steps, so a replay is deterministic (AX node ids are not stable).
Each step is a dict ``{"do": VERB, ...}`` or a string in the upstream action syntax:

- ``{"do": "goto", "url": U}`` / ``"goto [U]"``; ``{"do": "go_back"}``; ``{"do": "tab_focus", "index": I}``
- ``{"do": "click" | "hover" | "check" | "wait_for", LOCATOR}``
- ``{"do": "fill", LOCATOR, "value": V}``; ``{"do": "select", LOCATOR, "option": V}``
- ``{"do": "press", "key": K [, LOCATOR]}`` / ``"press [Enter]"``
- ``{"do": "stop", "answer": A}`` / ``"stop [A]"``, or ``{"do": "stop", "answer_from": LOCATOR, "join": ", "}``:
  the answer is the text the site shows, so retrieval tasks test the data, not an echo.
- the upstream ``playwright`` action-set strings, e.g. ``page.get_by_role("link", name="Forums").click()``
  (parsed with ``ast`` against a whitelist, never evaluated).

LOCATOR keys: ``role`` (+ ``name``, ``exact``), ``label``, ``placeholder``, ``test_id``, ``text``,
``css``; optional ``nth``. Exactly one kind per step.
"""
from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from playwright.sync_api import BrowserContext, Locator, Page

LOCATOR_KINDS = ("role", "label", "placeholder", "test_id", "text", "css")
VERBS = ("goto", "go_back", "tab_focus", "click", "hover", "check", "wait_for", "fill", "select", "press", "stop")


class RecipeError(ValueError):
    """A recipe step is malformed (reported before anything runs)."""


@dataclass
class Step:
    """One executed action: what was done, where the browser ended up, and a screenshot."""

    index: int
    action: str
    url: str
    ok: bool
    error: str | None = None
    elapsed_s: float = 0.0
    screenshot: bytes | None = field(default=None, repr=False)


@dataclass
class Trajectory:
    """An episode: steps in order, the final stop answer, the URL of the current tab at stop."""

    task_id: str
    steps: list[Step] = field(default_factory=list)
    answer: str = ""
    final_url: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


# ---------------------------------------------------------------- recipe parsing

_BRACKET = re.compile(r"^(goto|press|stop|tab_focus)\s*\[(.*)\]\s*$", re.S)


def parse_step(step: Any) -> dict[str, Any]:
    """Normalise one recipe step to the dict form and validate it."""
    if isinstance(step, str):
        step = _parse_string_step(step.strip())
    if not isinstance(step, dict) or step.get("do") not in VERBS:
        raise RecipeError(f"recipe step {step!r}: 'do' must be one of {', '.join(VERBS)}")
    verb = step["do"]
    kinds = [k for k in LOCATOR_KINDS if k in step]
    needs_locator = verb in ("click", "hover", "check", "wait_for", "fill", "select")
    if needs_locator and len(kinds) != 1:
        raise RecipeError(f"recipe step {step!r}: {verb} needs exactly one locator of {', '.join(LOCATOR_KINDS)}")
    if verb == "goto" and not step.get("url"):
        raise RecipeError(f"recipe step {step!r}: goto needs 'url'")
    if verb == "fill" and "value" not in step:
        raise RecipeError(f"recipe step {step!r}: fill needs 'value'")
    if verb == "select" and "option" not in step:
        raise RecipeError(f"recipe step {step!r}: select needs 'option'")
    if verb == "press" and not step.get("key"):
        raise RecipeError(f"recipe step {step!r}: press needs 'key'")
    if verb == "stop" and "answer_from" in step:
        parse_step({"do": "wait_for", **step["answer_from"]})
    return step


def parse_recipe(recipe: list[Any]) -> list[dict[str, Any]]:
    steps = [parse_step(s) for s in recipe]
    if not steps or steps[-1]["do"] != "stop":
        raise RecipeError("a recipe must end with a stop step (the answer, possibly empty)")
    return steps


def _parse_string_step(text: str) -> dict[str, Any]:
    if text in ("go_back", "stop"):
        return {"do": text, "answer": ""} if text == "stop" else {"do": "go_back"}
    m = _BRACKET.match(text)
    if m:
        verb, arg = m.group(1), m.group(2)
        if verb == "tab_focus":
            return {"do": "tab_focus", "index": int(arg or 0)}
        return {"do": verb, {"goto": "url", "press": "key", "stop": "answer"}[verb]: arg}
    if text.startswith("page."):
        return _parse_playwright_call(text)
    raise RecipeError(f"cannot parse recipe step {text!r}")


_PW_LOCATORS = {"get_by_role": "role", "get_by_label": "label", "get_by_placeholder": "placeholder",
                "get_by_test_id": "test_id", "get_by_text": "text", "locator": "css"}
_PW_ACTIONS = {"click": "click", "hover": "hover", "check": "check", "fill": "fill", "type": "fill",
               "select_option": "select", "press": "press"}


def _parse_playwright_call(text: str) -> dict[str, Any]:
    """``page.get_by_role("link", name="X").click()`` -> a step dict (whitelisted calls only)."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise RecipeError(f"cannot parse playwright step {text!r}") from exc
    chain: list[tuple[str, list[Any], dict[str, Any]]] = []
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        try:
            args = [ast.literal_eval(a) for a in node.args]
            kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
        except ValueError as exc:
            raise RecipeError(f"playwright step arguments must be literals: {text!r}") from exc
        chain.append((node.func.attr, args, kwargs))
        node = node.func.value
    if not (isinstance(node, ast.Name) and node.id == "page") or not chain:
        raise RecipeError(f"playwright step must be a call chain on page: {text!r}")
    chain.reverse()
    if len(chain) == 1:
        name, args, _ = chain[0]
        if name == "goto" and args:
            return {"do": "goto", "url": args[0]}
        if name == "stop":
            return {"do": "stop", "answer": args[0] if args else ""}
        if name == "go_back":
            return {"do": "go_back"}
        if name == "keyboard_press" or (name == "press" and len(args) == 1):
            return {"do": "press", "key": args[0]}
        raise RecipeError(f"unsupported playwright step {text!r}")
    (loc_name, loc_args, loc_kwargs), *rest = chain
    if loc_name not in _PW_LOCATORS or not loc_args:
        raise RecipeError(f"unsupported playwright locator in {text!r}")
    step: dict[str, Any] = {_PW_LOCATORS[loc_name]: loc_args[0]}
    if "name" in loc_kwargs:
        step["name"] = loc_kwargs["name"]
    if "exact" in loc_kwargs:
        step["exact"] = loc_kwargs["exact"]
    for name, args, _ in rest[:-1]:
        if name == "nth" and args:
            step["nth"] = int(args[0])
        elif name == "first":
            step["nth"] = 0
        else:
            raise RecipeError(f"unsupported playwright call {name} in {text!r}")
    action, args, _ = rest[-1]
    if action not in _PW_ACTIONS:
        raise RecipeError(f"unsupported playwright action {action} in {text!r}")
    step["do"] = _PW_ACTIONS[action]
    if step["do"] == "fill":
        step["value"] = args[0] if args else ""
    elif step["do"] == "select":
        step["option"] = args[0] if args else ""
    elif step["do"] == "press":
        step["key"] = args[0] if args else "Enter"
    return step


# ---------------------------------------------------------------- execution

def locate(page: Page, spec: dict[str, Any]) -> Locator:
    """A Playwright locator for a step's locator keys."""
    exact = spec.get("exact")
    if "role" in spec:
        kw: dict[str, Any] = {}
        if "name" in spec:
            kw["name"] = spec["name"]
            if exact is not None:
                kw["exact"] = bool(exact)
        loc = page.get_by_role(spec["role"], **kw)
    elif "label" in spec:
        loc = page.get_by_label(spec["label"], exact=bool(exact))
    elif "placeholder" in spec:
        loc = page.get_by_placeholder(spec["placeholder"], exact=bool(exact))
    elif "test_id" in spec:
        loc = page.get_by_test_id(spec["test_id"])
    elif "text" in spec:
        loc = page.get_by_text(spec["text"], exact=bool(exact))
    elif "css" in spec:
        loc = page.locator(spec["css"])
    else:
        raise RecipeError(f"no locator in {spec!r}")
    if "nth" in spec:
        loc = loc.nth(int(spec["nth"]))
    return loc


def describe(step: dict[str, Any]) -> str:
    """A readable one-line form of a step, for trajectories and reports."""
    verb = step["do"]
    if verb == "goto":
        return f"goto [{step['url']}]"
    if verb == "stop":
        if "answer_from" in step:
            return f"stop [text of {_describe_locator(step['answer_from'])}]"
        return f"stop [{step.get('answer', '')}]"
    parts = [verb]
    kinds = [k for k in LOCATOR_KINDS if k in step]
    if kinds:
        parts.append(_describe_locator(step))
    if verb == "fill":
        parts.append(f"value={step['value']!r}")
    if verb == "select":
        parts.append(f"option={step['option']!r}")
    if verb == "press":
        parts.append(f"[{step['key']}]")
    if verb == "tab_focus":
        parts.append(f"[{step.get('index', 0)}]")
    return " ".join(parts)


def _describe_locator(spec: dict[str, Any]) -> str:
    for k in LOCATOR_KINDS:
        if k in spec:
            s = f"{k}={spec[k]!r}"
            if k == "role" and "name" in spec:
                s += f" name={spec['name']!r}"
            if "nth" in spec:
                s += f" nth={spec['nth']}"
            return s
    return "?"


class ReferenceAgent:
    """Executes recipes. ``screenshots`` records a JPEG after every step for the report."""

    def __init__(self, *, step_timeout_ms: int = 15_000, screenshots: bool = True, settle_ms: int = 2_000) -> None:
        self.step_timeout_ms = step_timeout_ms
        self.screenshots = screenshots
        self.settle_ms = settle_ms

    def open_tabs(self, context: BrowserContext, start_urls: list[str] | tuple[str, ...]) -> Page:
        """One tab per start URL (``|AND|``), focus on the first, as upstream's env.reset does."""
        pages = []
        for url in start_urls:
            p = context.new_page()
            p.set_default_timeout(self.step_timeout_ms)
            p.goto(url, wait_until="load")
            pages.append(p)
        pages[0].bring_to_front()
        return pages[0]

    def run(self, task_id: str, recipe: list[Any], page: Page) -> tuple[Trajectory, Page]:
        """Replay ``recipe`` from ``page``; return the trajectory and the tab current at stop."""
        traj = Trajectory(task_id=task_id)
        steps = parse_recipe(recipe)
        for i, step in enumerate(steps):
            started = time.monotonic()
            action = describe(step)
            try:
                page, answer = self._execute(step, page)
                if answer is not None:
                    traj.answer = answer
                    action = f"stop [{answer}]"
                ok, error = True, None
            except Exception as exc:  # a failed step ends the episode, as an early stop would
                ok, error = False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            traj.steps.append(Step(index=i, action=action, url=page.url, ok=ok, error=error,
                                   elapsed_s=round(time.monotonic() - started, 3), screenshot=self._shot(page)))
            if not ok:
                traj.error = f"step {i} ({action}) failed: {error}"
                traj.answer = ""
                break
            if step["do"] == "stop":
                break
        traj.final_url = page.url
        return traj, page

    def _execute(self, step: dict[str, Any], page: Page) -> tuple[Page, str | None]:
        verb = step["do"]
        if verb == "goto":
            page.goto(step["url"], wait_until="load")
        elif verb == "go_back":
            page.go_back(wait_until="load")
        elif verb == "tab_focus":
            page = page.context.pages[int(step.get("index", 0))]
            page.bring_to_front()
        elif verb == "stop":
            if "answer_from" in step:
                texts = [t.strip() for t in locate(page, step["answer_from"]).all_inner_texts()]
                if not texts:
                    raise LookupError(f"nothing matches {_describe_locator(step['answer_from'])}")
                return page, str(step.get("join", ", ")).join(texts)
            return page, str(step.get("answer", ""))
        elif verb == "press" and not any(k in step for k in LOCATOR_KINDS):
            page.keyboard.press(step["key"])
        else:
            loc = locate(page, step)
            if verb == "click":
                loc.click()
            elif verb == "hover":
                loc.hover()
            elif verb == "check":
                loc.check()
            elif verb == "wait_for":
                loc.wait_for(state="visible")
            elif verb == "fill":
                loc.fill(str(step["value"]))
            elif verb == "select":
                loc.select_option(str(step["option"]))
            elif verb == "press":
                loc.press(step["key"])
        self._settle(page)
        return page, None

    def _settle(self, page: Page) -> None:
        """Let a navigation started by the action finish (bounded; long-polling pages never idle)."""
        try:
            page.wait_for_load_state("load", timeout=self.step_timeout_ms)
            page.wait_for_load_state("networkidle", timeout=self.settle_ms)
        except Exception:
            pass

    def _shot(self, page: Page) -> bytes | None:
        if not self.screenshots:
            return None
        try:
            return page.screenshot(type="jpeg", quality=55, timeout=10_000)
        except Exception:
            return None
