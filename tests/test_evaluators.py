"""The WebArena evaluator rules (research/evaluation.md §2), each with a passing and a failing case."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from envctl.smoke.evaluators import (Check, Evaluation, clean_answer, evaluate, must_include,
                                     parse_helper_call, required_contents_check, string_match_checks, url_match)
from envctl.smoke.judge import Judge
from envctl.smoke.tasks import TaskConfigError, task_from_config


def _task(eval_: dict, **extra: object) -> object:
    cfg = {"task_id": 1, "sites": ["shopping"], "start_url": "__SHOPPING__", "intent": "q", "eval": eval_, **extra}
    return task_from_config(cfg, {"SHOPPING": "http://127.0.0.1:1"})


def _score(reference_answers: dict, answer: str, judge: Judge | None = None) -> float | None:
    return Evaluation(string_match_checks(reference_answers, answer, judge=judge)).score


# ---------------------------------------------------------------- normalisation


@pytest.mark.parametrize("raw,clean", [
    ("  Hello ", "hello"), ("'Quoted'", "quoted"), ('"Quoted"', "quoted"), ("'half", "'half"),
    ("''twice''", "'twice'"), ("A  B", "a  b"), ("Lumaflex™", "lumaflex™"),
])
def test_clean_answer_strips_one_quote_pair_and_lowercases_only(raw: str, clean: str) -> None:
    assert clean_answer(raw) == clean


def test_exact_match_pass_and_fail() -> None:
    assert _score({"exact_match": "Quest Lumaflex™ Band"}, " 'quest lumaflex™ band' ") == 1.0
    assert _score({"exact_match": "Quest Lumaflex™ Band"}, "Quest Lumaflex Band") == 0.0  # no unicode folding
    assert _score({"exact_match": "yjlou"}, "@yjlou") == 0.0
    assert _score({"exact_match": "a b"}, "a  b") == 0.0  # no whitespace collapsing


def test_must_include_substring_pass_and_fail() -> None:
    assert _score({"must_include": ["hollister", "Joust Bag"]}, "Hollister and joust bag") == 1.0
    assert _score({"must_include": ["hollister", "Joust Bag"]}, "hollister only") == 0.0
    assert must_include("170", "000000170") == 1.0  # WA: plain substring, zero padding passes


def test_must_include_tokenises_only_a_sole_single_character_reference() -> None:
    assert _score({"must_include": ["0"]}, "There are 0 such comments") == 1.0
    assert _score({"must_include": ["0"]}, "$0.00") == 0.0  # tokens ['$', '0.00'] (webarena #211)
    assert _score({"must_include": ["2"]}, "12") == 0.0  # sole 1-char ref: token membership
    assert _score({"must_include": ["2", "1"]}, "12") == 1.0  # several refs: plain substring


def test_string_match_does_not_split_or() -> None:
    assert _score({"must_include": ["65 |OR| 3"]}, "65") == 0.0
    assert _score({"must_include": ["65 |OR| 3"]}, "65 |or| 3") == 1.0


def test_all_reference_keys_apply_as_a_product() -> None:
    assert _score({"must_include": ["a"], "exact_match": "a"}, "a") == 1.0
    assert _score({"must_include": ["abc"], "exact_match": "xyz"}, "abc") == 0.0


# ---------------------------------------------------------------- fuzzy_match / judge


def test_fuzzy_match_without_judge_is_skipped_never_passed() -> None:
    ev = Evaluation(string_match_checks({"fuzzy_match": ["Sprite"]}, "sprite"))
    assert ev.score is None and ev.status == "skip" and "needs judge" in ev.reason


def test_na_answered_exactly_needs_no_judge_otherwise_skipped() -> None:
    assert _score({"fuzzy_match": "N/A"}, "N/A") == 1.0
    ev = Evaluation(string_match_checks({"fuzzy_match": "N/A"}, "cannot find it"))
    assert ev.status == "skip"


def test_a_failing_deterministic_check_beats_a_skipped_judge_check() -> None:
    ev = Evaluation(string_match_checks({"must_include": ["x"], "fuzzy_match": ["y"]}, "nothing"))
    assert ev.status == "fail"


class _FakeChat(BaseHTTPRequestHandler):
    """An OpenAI-compatible /chat/completions that says 'correct' iff the student answer contains 'sprite'."""

    seen: list[dict] = []

    def log_message(self, *a: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _FakeChat.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        prompt = body["messages"][-1]["content"]
        student = prompt.split("student answer:")[-1] if "student answer:" in prompt else prompt.split("Report_1 =")[-1]
        if "Task_1" in prompt:
            verdict = "[same]" if "not exist" in student else "[different]"
        else:
            verdict = "correct" if "sprite" in student.lower() else "incorrect"
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": f"Verdict: {verdict}"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake_judge() -> Iterator[Judge]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _FakeChat)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield Judge(base_url=f"http://127.0.0.1:{srv.server_address[1]}/v1", model="judge-model", api_key="k")
    srv.shutdown()
    srv.server_close()


def test_fuzzy_match_with_a_configured_judge(fake_judge: Judge) -> None:
    assert _score({"fuzzy_match": ["Sprite"]}, "The brand is Sprite") == None  # noqa: E711 (no judge)
    assert _score({"fuzzy_match": ["Sprite"]}, "The brand is Sprite", fake_judge) == 1.0
    assert _score({"fuzzy_match": ["Sprite"]}, "Nike", fake_judge) == 0.0
    assert _score({"fuzzy_match": "N/A"}, "That order does not exist", fake_judge) == 1.0
    assert _score({"fuzzy_match": "N/A"}, "It is 42", fake_judge) == 0.0
    last = _FakeChat.seen[-1]
    assert last["path"] == "/v1/chat/completions" and last["auth"] == "Bearer k"
    assert last["body"]["model"] == "judge-model" and last["body"]["temperature"] == 0.0


def test_judge_is_configured_only_by_env() -> None:
    assert Judge.from_env({}) is None
    j = Judge.from_env({"ENVCTL_JUDGE_BASE_URL": "http://h/v1", "ENVCTL_JUDGE_MODEL": "m"})
    assert j is not None and j.model == "m"


# ---------------------------------------------------------------- url_match


@pytest.mark.parametrize("ref,pred,score", [
    ("http://h:8023/dashboard/todos", "http://h:8023/dashboard/todos/", 1.0),
    ("http://h:8023/dashboard/todos", "https://h:8023/dashboard/todos?state=done#x", 1.0),  # scheme, extras ignored
    ("http://h/f/book", "http://h/f/books", 1.0),  # GOLD in PRED is a substring test
    ("http://h/dashboard/todos", "http://h/dashboard/issues", 0.0),
    ("http://h/dashboard/merge_requests?assignee_username=byteblaze",
     "http://h/dashboard/merge_requests?assignee_username=byteblaze&sort=x", 1.0),
    ("http://h/dashboard/merge_requests?assignee_username=byteblaze",
     "http://h/dashboard/merge_requests?assignee_username=other", 0.0),
    ("http://h/dashboard/merge_requests?assignee_username=byteblaze", "http://h/dashboard/merge_requests", 0.0),
    ("http://h/catalogsearch/result/?q=usb+wifi", "http://h/catalogsearch/result/?q=usb%20wifi", 1.0),
    ("http://h/issues/?label_name%5B%5D=question", "http://h/issues/?label_name[]=question", 1.0),
    ("http://h/a |OR| http://h/b", "http://h/b", 1.0),
    ("http://h/a |OR| http://h/b", "http://h/c", 0.0),
    # the upstream quirk: query keys of ALL alternatives are required at once
    ("http://h/a?x=1 |OR| http://h/b?y=2", "http://h/b?y=2", 0.0),
    ("http://h/a?x=1 |OR| http://h/b?y=2", "http://h/b?y=2&x=1", 1.0),
])
def test_url_match_gold_in_pred(ref: str, pred: str, score: float) -> None:
    assert url_match(ref, pred) == score


def test_url_match_rejects_unknown_rule() -> None:
    with pytest.raises(ValueError):
        url_match("http://h/a", "http://h/a", "SOMETIMES")


def test_url_match_exact_as_visualwebarena() -> None:
    ref = "http://localhost:9980/index.php?page=item&id=4799/ |OR| http://h/x"
    assert url_match(ref, "http://127.0.0.1:9980/index.php?page=item&id=4799", "EXACT") == 1.0
    assert url_match(ref, "http://h/x/", "EXACT") == 1.0
    assert url_match(ref, "http://127.0.0.1:9980/index.php?page=item&id=4799&x=1", "EXACT") == 0.0


# ---------------------------------------------------------------- required_contents and helpers


def test_required_contents_rules() -> None:
    assert required_contents_check({"exact_match": "Busy"}, " busy ")[0] == 1.0
    assert required_contents_check({"exact_match": "Busy"}, "Busy now")[0] == 0.0
    assert required_contents_check({"must_include": ["$25000 |OR| $25,000"]}, "now $25,000!")[0] == 1.0
    assert required_contents_check({"must_include": ["$25000 |OR| $25,000"]}, "now $30,000")[0] == 0.0
    assert required_contents_check({"must_exclude": ["30000", "30,000"]}, "now $25,000")[0] == 1.0
    assert required_contents_check({"must_exclude": ["30000", "30,000"]}, "was $30,000")[0] == 0.0
    assert required_contents_check({"required_values": [">= 20", "< 22"]}, "21")[0] == 1.0
    assert required_contents_check({"required_values": [">= 22 |OR| == 7"]}, "21")[0] == 0.0
    assert required_contents_check({"fuzzy_match": ["x"]}, "x")[0] is None
    with pytest.raises(ValueError):
        required_contents_check({"exact_match": "a", "must_include": ["a"]}, "a")


def test_helper_calls_are_parsed_never_evaluated() -> None:
    assert parse_helper_call("reddit_get_post_url('http://h/f/x/1/y')") == ("reddit_get_post_url", ["http://h/f/x/1/y"])
    for bad in ("__import__('os').system('true')", "get_query_text(__page__, open('x'))", "a.b()"):
        with pytest.raises(ValueError):
            parse_helper_call(bad)


# ---------------------------------------------------------------- task configs


def test_placeholders_fill_everything_and_tabs_split() -> None:
    cfg = {"task_id": 7, "sites": ["shopping_admin", "shopping"], "start_url": "__SHOPPING_ADMIN__ |AND| __SHOPPING__",
           "intent": "x", "storage_state": "./.auth/shopping.shopping_admin_state.json",
           "eval": {"eval_types": ["url_match"], "reference_url": "__SHOPPING_ADMIN__/../p.html",
                    "reference_answers": {"must_include": ["__SHOPPING__/x"]}}}
    t = task_from_config(cfg, {"SHOPPING": "http://h:7770/", "SHOPPING_ADMIN": "http://h:7780/admin"})
    assert t.start_urls == ("http://h:7780/admin", "http://h:7770")
    assert t.eval["reference_url"] == "http://h:7780/admin/../p.html"
    assert t.eval["reference_answers"]["must_include"] == ["http://h:7770/x"]
    assert t.storage_state_name == "shopping.shopping_admin_state.json"
    with pytest.raises(TaskConfigError, match="SHOPPING_ADMIN"):
        task_from_config(cfg, {"SHOPPING": "http://h:7770"})


# ---------------------------------------------------------------- program_html in a real browser

PAGES = {
    "/user/emma": "<h1>Emma</h1><p class='user-bio'>Pro Python Developer with 20 years of Experience</p>"
                  "<div id='sidebar_content'><h2>Carnegie Music Hall</h2></div><span class='price'>$25,000</span>"
                  "<button id='more' onclick=\"document.querySelector('#hidden').textContent='expanded'\">more</button>"
                  "<p id='hidden'>collapsed</p>",
    "/f/books/42/some-title": "<h1>A post</h1><p class='body'>Read The Hobbit &amp; more</p>",
    "/f/books/42": "<h1>A post (canonical)</h1><p class='body'>canonical page</p>",
}


class _Pages(BaseHTTPRequestHandler):
    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        body = PAGES.get(self.path.rstrip("/") or "/")
        data = f"<!doctype html><html><body>{body or '<h1>404</h1>'}</body></html>".encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def pages_url() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def page(browser: object, pages_url: str) -> Iterator[object]:
    ctx = browser.new_context()  # type: ignore[attr-defined]
    p = ctx.new_page()
    p.goto(pages_url + "/f/books/42/some-title")
    yield p
    ctx.close()


def _html_eval(page: object, base: str, targets: list[dict]) -> Evaluation:
    return evaluate(_task({"eval_types": ["program_html"], "program_html": targets}), "", page,
                    env={"SHOPPING": base})


@pytest.mark.browser
def test_program_html_js_locator_on_a_fixed_url(page: object, pages_url: str) -> None:
    loc = 'document.querySelector(".user-bio").outerText'
    good = _html_eval(page, pages_url, [{"url": pages_url + "/user/emma", "locator": loc,
                                         "required_contents": {"exact_match": "Pro Python Developer with 20 years of Experience"}}])
    assert good.status == "pass", good.reason
    bad = _html_eval(page, pages_url, [{"url": pages_url + "/user/emma", "locator": loc,
                                        "required_contents": {"exact_match": "Pro Python Developer"}}])
    assert bad.status == "fail"
    assert page.url.endswith("/f/books/42/some-title")  # fixed URLs open in a new tab; the agent's tab stays
    assert len(page.context.pages) == 1


@pytest.mark.browser
def test_program_html_unbalanced_upstream_locator_runs_in_chromium(page: object, pages_url: str) -> None:
    target = {"url": pages_url + "/user/emma", "locator": "document.querySelector('[id=\"sidebar_content\"').outerText",
              "required_contents": {"must_include": ["Carnegie Music Hall"]}}
    assert _html_eval(page, pages_url, [target]).status == "pass"
    target["required_contents"] = {"must_include": ["Carnegie Mellon University"]}
    assert _html_eval(page, pages_url, [target]).status == "fail"


@pytest.mark.browser
def test_program_html_last_page_full_html_and_unescape(page: object, pages_url: str) -> None:
    ok = _html_eval(page, pages_url, [{"url": "last", "locator": "", "required_contents": {"must_include": ["class=\"body\""]}},
                                      {"url": "last", "locator": "document.querySelector('.body').innerHTML",
                                       "required_contents": {"must_include": ["The Hobbit & more"]}}])
    assert ok.status == "pass", ok.reason
    assert _html_eval(page, pages_url, [{"url": "last", "locator": "", "required_contents": {"must_include": ["Silmarillion"]}}]).status == "fail"


@pytest.mark.browser
def test_program_html_failing_locator_selects_empty_string(page: object, pages_url: str) -> None:
    ev = _html_eval(page, pages_url, [{"url": "last", "locator": "document.querySelector('.missing').outerText",
                                       "required_contents": {"exact_match": ""}}])
    assert ev.status == "pass"  # upstream: an exception in the locator yields ""
    ev = _html_eval(page, pages_url, [{"url": "last", "locator": "document.querySelector('.missing').outerText",
                                       "required_contents": {"must_include": ["x"]}}])
    assert ev.status == "fail"


@pytest.mark.browser
def test_program_html_prep_actions_run_before_the_locator(page: object, pages_url: str) -> None:
    target = {"url": pages_url + "/user/emma", "locator": "document.querySelector('#hidden').outerText",
              "required_contents": {"exact_match": "expanded"}}
    assert _html_eval(page, pages_url, [target]).status == "fail"
    target["prep_actions"] = ["document.querySelector('#more').click()"]
    assert _html_eval(page, pages_url, [target]).status == "pass"


@pytest.mark.browser
def test_program_html_func_helpers(page: object, pages_url: str) -> None:
    ev = _html_eval(page, pages_url, [
        {"url": "func:reddit_get_post_url('__last_url__')", "locator": "func:get_query_text(__page__, '.body')",
         "required_contents": {"exact_match": "canonical page"}},
        {"url": pages_url + "/user/emma", "locator": "func:get_query_text(__page__, '.price')",
         "required_contents": {"must_include": ["$25000 |OR| $25,000"]}}])
    assert ev.status == "pass", ev.reason
    ev = _html_eval(page, pages_url, [{"url": "last", "locator": "func:get_query_text(__page__, '.nope')",
                                       "required_contents": {"must_include": ["Hobbit"]}}])
    assert ev.status == "fail"
    ev = _html_eval(page, pages_url, [{"url": "last", "locator": "func:not_a_helper(__page__)",
                                       "required_contents": {"must_include": ["x"]}}])
    assert ev.status == "skip" and "unsupported" in ev.reason


@pytest.mark.browser
def test_program_html_score_is_the_product_over_targets(page: object, pages_url: str) -> None:
    good = {"url": pages_url + "/user/emma", "locator": "document.querySelector('.price').outerText",
            "required_contents": {"must_include": ["25,000"]}}
    bad = {"url": "last", "locator": "document.querySelector('h1').outerText", "required_contents": {"exact_match": "Nope"}}
    assert _html_eval(page, pages_url, [good, good]).score == 1.0
    ev = _html_eval(page, pages_url, [good, bad])
    assert ev.score == 0.0 and [c.score for c in ev.checks] == [1.0, 0.0]


@pytest.mark.browser
def test_router_combines_eval_types(page: object, pages_url: str) -> None:
    cfg = {"eval_types": ["string_match", "url_match"], "reference_answers": {"must_include": ["hobbit"]},
           "reference_url": pages_url + "/f/books/42"}
    assert evaluate(_task(cfg), "The Hobbit", page, env={}).status == "pass"
    assert evaluate(_task(cfg), "Dune", page, env={}).status == "fail"
    cfg["reference_url"] = pages_url + "/f/movies"
    assert evaluate(_task(cfg), "The Hobbit", page, env={}).status == "fail"
    assert isinstance(evaluate(_task(cfg), "x", page, env={}).checks[0], Check)
