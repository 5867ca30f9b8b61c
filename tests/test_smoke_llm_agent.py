"""The optional LLM agent: real Chromium, real CDP accessibility tree, a scripted OpenAI-compatible server."""
from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from conftest import CHROMIUM
from envctl.errors import EnvctlError
from envctl.smoke import run_smoke
from envctl.smoke.llm_agent import LLMAgent, parse_action
from envctl.smoke.tasks import task_from_config
from smoke_site import SmokeSite


class _Policy(BaseHTTPRequestHandler):
    """A 'model' that reads the observation: click Products, then the Joust Bag link, then stop with the price."""

    prompts: list[str] = []
    babble = False

    def log_message(self, *a: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        _Policy.prompts.append(prompt)
        url = re.search(r"^URL: (.*)$", prompt, re.M).group(1)  # type: ignore[union-attr]

        def node(role: str, name: str) -> str:
            return re.search(rf"\[(\S+)\] {role} '{re.escape(name)}'", prompt).group(1)  # type: ignore[union-attr]

        if _Policy.babble:
            action = "I am not sure what to do."
        elif url.endswith("/products/3"):
            price = re.search(r"'(\$[\d.]+)'", prompt).group(1)  # type: ignore[union-attr]
            action = f"The price is shown. In summary, the next action I will perform is ```stop [{price}]```"
        elif url.endswith("/products"):
            action = f"In summary, the next action I will perform is ```click [{node('link', 'Joust Bag')}]```"
        else:
            action = f"In summary, the next action I will perform is ```click [{node('link', 'Products')}]```"
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": action}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Policy]]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Policy)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setenv("ENVCTL_AGENT_BASE_URL", f"http://127.0.0.1:{srv.server_address[1]}/v1")
    monkeypatch.setenv("ENVCTL_AGENT_MODEL", "scripted")
    _Policy.prompts, _Policy.babble = [], False
    yield _Policy
    srv.shutdown()
    srv.server_close()


def _task(site: SmokeSite) -> object:
    return task_from_config({"task_id": "llm-price", "sites": ["shopping"], "start_url": "__SHOPPING__/",
                             "intent": "What is the price of the Joust Bag?",
                             "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["34.00"]}}},
                            {"SHOPPING": site.url})


def test_parse_action_reads_the_fenced_span_after_the_answer_phrase() -> None:
    assert parse_action("```click [3]``` In summary, the next action I will perform is ```type [7] [usb wifi] [0]```") \
        == ("type", ["7", "usb wifi", "0"])
    assert parse_action("```stop []```") == ("stop", [""])
    assert parse_action("```go_back```") == ("go_back", [])
    for bad in ("click [3]", "```click```", "```explode [1]```", "```type [3]```"):
        assert parse_action(bad) is None


def test_unconfigured_llm_agent_is_an_error_with_a_hint() -> None:
    with pytest.raises(EnvctlError, match="ENVCTL_AGENT_BASE_URL"):
        LLMAgent.from_env({})


@pytest.mark.browser
def test_llm_agent_runs_through_the_smoke_harness(model: type[_Policy]) -> None:
    with SmokeSite() as site:
        result = run_smoke([_task(site)], env={"SHOPPING": site.url}, agent="llm", browser_path=CHROMIUM)
    by_id = {t.task_id: t for t in result.tasks}
    task = by_id["llm-price"]
    assert task.status == "pass", task.reason
    assert task.answer == "$34.00" and task.final_url == site.url + "/products/3"
    assert [s.action.split(" ")[0] for s in task.steps] == ["click", "click", "stop"]
    assert by_id["llm-price:negative-control"].status == "pass" and result.ok
    first = model.prompts[0]
    assert first.startswith("OBSERVATION:\nTab 0 (current): Home\n\n") and "\nOBJECTIVE: What is the price" in first
    assert "PREVIOUS ACTION: None" in first and re.search(r"\[\S+\] link 'Products'", first)
    assert "PREVIOUS ACTION: click [" in model.prompts[1]


@pytest.mark.browser
def test_llm_agent_early_stops_on_unparsable_replies(model: type[_Policy]) -> None:
    model.babble = True
    with SmokeSite() as site:
        result = run_smoke([_task(site)], env={"SHOPPING": site.url}, agent="llm", browser_path=CHROMIUM)
    task = {t.task_id: t for t in result.tasks}["llm-price"]
    assert task.status == "fail" and task.answer == "Early stop: failed to parse actions" and len(task.steps) == 3
