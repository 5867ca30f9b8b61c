"""An optional LLM agent over any OpenAI-compatible chat endpoint, in WebArena's observation/action format.

Not used by the smoke suite; it lets a user run a real model through the same harness
(``run_smoke(..., agent="llm")``). Observation: the page's accessibility tree from CDP
``Accessibility.getFullAXTree`` rendered as upstream does (``[id] role 'name' prop: value``, tab line
first; simplification: no viewport filtering). Actions: upstream's id-based grammar (``click [id]``,
``type [id] [text] [0|1]``, ``hover``, ``press``, ``scroll``, ``goto``, ``go_back``, ``go_forward``,
``new_tab``, ``tab_focus``, ``close_tab``, ``stop [answer]``), parsed from the first fenced span after
the answer phrase. Early stop after 3 unparsable replies or 3 identical actions in a row.

Configuration: ``ENVCTL_AGENT_BASE_URL``, ``ENVCTL_AGENT_MODEL``, optional ``ENVCTL_AGENT_API_KEY``.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envctl.errors import EnvctlError
from envctl.smoke.agent import Step, Trajectory
from envctl.smoke.judge import chat_completion
from envctl.validate import env_value

if TYPE_CHECKING:  # pragma: no cover
    from playwright.sync_api import Page

    from envctl.smoke.tasks import Task

ANSWER_PHRASE = "In summary, the next action I will perform is"
IGNORED_PROPS = {"focusable", "editable", "readonly", "level", "settable", "multiline", "invalid"}
SKIP_UNNAMED = {"generic", "img", "list", "strong", "paragraph", "banner", "navigation", "Section", "LabelText",
                "Legend", "listitem"}
SYSTEM_PROMPT = f"""You are an autonomous agent operating a web browser to complete a task.
Each turn you get: OBSERVATION (the current page's accessibility tree; every element has an [id]),
URL, OBJECTIVE and PREVIOUS ACTION. Reply with exactly one action from this list:
click [id] | type [id] [content] [press_enter_after=0|1] | hover [id] | press [key_comb] |
scroll [up|down] | new_tab | tab_focus [tab_index] | close_tab | goto [url] | go_back | go_forward |
stop [answer]  (use stop when done; put the answer in the brackets, or leave it empty; answer N/A if impossible).
Think step by step, then finish with: "{ANSWER_PHRASE} ```action```"."""


@dataclass(frozen=True)
class LLMAgentConfig:
    base_url: str
    model: str
    api_key: str | None = None
    temperature: float = 0.0
    max_tokens: int = 384
    max_steps: int = 30
    max_obs_chars: int = 8000  # upstream truncates to 1920 tokens


def render_accessibility_tree(page: Page) -> tuple[str, dict[str, int]]:
    """The AX tree as upstream's text plus a map ``id -> backendDOMNodeId`` for acting on nodes."""
    cdp = page.context.new_cdp_session(page)
    try:
        nodes = cdp.send("Accessibility.getFullAXTree", {})["nodes"]
    finally:
        cdp.detach()
    by_id = {n["nodeId"]: n for n in nodes}
    backend: dict[str, int] = {}
    lines: list[str] = []

    def visit(node_id: str, depth: int) -> None:
        node = by_id.get(node_id)
        if node is None:
            return
        role = (node.get("role") or {}).get("value", "")
        name = str((node.get("name") or {}).get("value", "") or "")
        props = [f"{p['name']}: {p.get('value', {}).get('value')}" for p in node.get("properties", [])
                 if p["name"] not in IGNORED_PROPS]
        # InlineTextBox nodes are layout internals newer Chromium exposes; upstream's trees never had them
        keep = not node.get("ignored") and role not in ("none", "Ignored", "", "InlineTextBox")
        if keep and not name and not props and role in SKIP_UNNAMED:
            keep = False
        if keep and role == "StaticText" and any(name in prev for prev in lines[-3:]):
            keep = False
        if keep:
            lines.append("\t" * depth + f"[{node_id}] {role} {name!r}" + "".join(f" {p}" for p in props))
            if "backendDOMNodeId" in node:
                backend[node_id] = node["backendDOMNodeId"]
        for child in node.get("childIds", []):
            visit(child, depth + 1 if keep else depth)

    roots = [n["nodeId"] for n in nodes if not n.get("parentId")]
    for r in roots:
        visit(r, 0)
    return "\n".join(lines), backend


_ACTION_RE = re.compile(r"^(click|hover|type|press|scroll|goto|tab_focus|stop|go_back|go_forward|new_tab|close_tab)"
                        r"\s*((?:\[[^\]]*\]\s*)*)$", re.S)


def parse_action(reply: str) -> tuple[str, list[str]] | None:
    """The action in the first fenced span after the answer phrase (or anywhere), as (verb, args)."""
    tail = reply.split(ANSWER_PHRASE, 1)[-1]
    m = re.search(r"```(.*?)```", tail, re.S) or re.search(r"```(.*?)```", reply, re.S)
    if not m:
        return None
    text = m.group(1).strip()
    am = _ACTION_RE.match(text)
    if not am:
        return None
    verb = am.group(1)
    args = re.findall(r"\[([^\]]*)\]", am.group(2) or "")
    needs = {"click": 1, "hover": 1, "type": 2, "press": 1, "scroll": 1, "goto": 1, "tab_focus": 1}
    if len(args) < needs.get(verb, 0):
        return None
    return verb, args


class LLMAgent:
    def __init__(self, config: LLMAgentConfig) -> None:
        self.config = config

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> LLMAgent:
        e = os.environ if environ is None else environ
        base, model = env_value("ENVCTL_AGENT_BASE_URL", e), env_value("ENVCTL_AGENT_MODEL", e)
        if not base or not model:
            raise EnvctlError("the LLM agent is not configured",
                              hint="set ENVCTL_AGENT_BASE_URL (an OpenAI-compatible /v1 URL) and ENVCTL_AGENT_MODEL"
                                   " (and ENVCTL_AGENT_API_KEY if the server needs one), or use --agent reference")
        return cls(LLMAgentConfig(base_url=base, model=model, api_key=env_value("ENVCTL_AGENT_API_KEY", e)))

    def observe(self, page: Page) -> tuple[str, dict[str, int]]:
        self._settle(page)
        tabs = " | ".join(f"Tab {i}{' (current)' if p == page else ''}: {p.title()}"
                          for i, p in enumerate(page.context.pages))
        tree, backend = render_accessibility_tree(page)
        return f"{tabs}\n\n{tree}"[: self.config.max_obs_chars], backend

    def run(self, task: Task, page: Page, *, screenshots: bool = False) -> tuple[Trajectory, Page]:
        traj = Trajectory(task_id=task.task_id)
        previous, failures = "None", 0
        recent: list[str] = []
        for i in range(self.config.max_steps):
            started = time.monotonic()
            obs, backend = self.observe(page)
            user = f"OBSERVATION:\n{obs}\nURL: {page.url}\nOBJECTIVE: {task.intent}\nPREVIOUS ACTION: {previous}"
            reply = chat_completion(self.config.base_url, self.config.api_key, self.config.model,
                                    [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
                                    temperature=self.config.temperature, max_tokens=self.config.max_tokens)
            action = parse_action(reply)
            text = "none" if action is None else f"{action[0]} " + " ".join(f"[{a}]" for a in action[1])
            ok, error = True, None
            if action is None:
                failures += 1
                ok, error = False, "unparsable reply"
            else:
                failures = 0
                recent = (recent + [text])[-3:]
                try:
                    page, answer = self._execute(page, action, backend)
                    if answer is not None:
                        traj.answer = answer
                except Exception as exc:
                    ok, error = False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            shot = page.screenshot(type="jpeg", quality=55) if screenshots else None
            traj.steps.append(Step(index=i, action=text, url=page.url, ok=ok, error=error,
                                   elapsed_s=round(time.monotonic() - started, 3), screenshot=shot))
            previous = text
            if action is not None and action[0] == "stop":
                break
            if failures >= 3 or (len(recent) == 3 and len(set(recent)) == 1):
                traj.answer = "Early stop: " + ("failed to parse actions" if failures >= 3 else "same action repeated")
                break
        traj.final_url = page.url
        return traj, page

    def _execute(self, page: Page, action: tuple[str, list[str]], backend: dict[str, int]) -> tuple[Page, str | None]:
        verb, args = action
        if verb == "stop":
            return page, args[0] if args else ""
        if verb in ("click", "hover", "type"):
            x, y = self._center(page, backend, args[0])
            if verb == "hover":
                page.mouse.move(x, y)
            elif verb == "click":
                self._maybe_navigating(page, lambda: page.mouse.click(x, y))
            else:
                page.mouse.click(x, y)
                page.keyboard.type(args[1])
                if len(args) < 3 or args[2].strip() != "0":
                    self._maybe_navigating(page, lambda: page.keyboard.press("Enter"))
        elif verb == "press":
            self._maybe_navigating(page, lambda: page.keyboard.press(args[0].replace("Meta", "Control")))
        elif verb == "scroll":
            sign = -1 if args[0].strip().lower() == "up" else 1
            page.evaluate(f"window.scrollBy(0, {sign} * window.innerHeight)")
        elif verb == "goto":
            page.goto(args[0], wait_until="load")
        elif verb == "go_back":
            page.go_back()
        elif verb == "go_forward":
            page.go_forward()
        elif verb == "new_tab":
            page = page.context.new_page()
        elif verb == "tab_focus":
            page = page.context.pages[int(args[0])]
            page.bring_to_front()
        elif verb == "close_tab":
            context = page.context
            page.close()
            page = context.pages[-1]
            page.bring_to_front()
        self._settle(page)
        return page, None

    @staticmethod
    def _maybe_navigating(page: Page, act: Any, window_ms: int = 1_500) -> None:
        """Run an input action that may or may not navigate; if it does, wait for the new document.

        (Upstream sleeps 2 s after every action instead.)"""
        try:
            with page.expect_navigation(wait_until="load", timeout=window_ms):
                act()
        except Exception as exc:
            if "Timeout" not in type(exc).__name__ and "Timeout" not in str(exc):
                raise

    @staticmethod
    def _settle(page: Page) -> None:
        """A click may start a navigation a moment later: wait for load and a quiet network (bounded)."""
        try:
            page.wait_for_load_state("load", timeout=10_000)
            page.wait_for_load_state("networkidle", timeout=2_000)
        except Exception:
            pass

    @staticmethod
    def _center(page: Page, backend: dict[str, int], node_id: str) -> tuple[float, float]:
        if node_id not in backend:
            raise LookupError(f"no element with id [{node_id}] in the observation")
        cdp = page.context.new_cdp_session(page)
        try:
            cdp.send("DOM.getDocument", {"depth": 0})
            cdp.send("DOM.scrollIntoViewIfNeeded", {"backendNodeId": backend[node_id]})
            quad = cdp.send("DOM.getBoxModel", {"backendNodeId": backend[node_id]})["model"]["content"]
        finally:
            cdp.detach()
        xs, ys = quad[0::2], quad[1::2]
        return sum(xs) / 4, sum(ys) / 4
