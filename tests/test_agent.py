"""The reference agent replays recipes on a hand-made multi-page site; the evaluator scores the result."""
from __future__ import annotations

from typing import Iterator

import pytest

from envctl.smoke.agent import RecipeError, ReferenceAgent, parse_recipe, parse_step
from envctl.smoke.evaluators import evaluate
from envctl.smoke.tasks import task_from_config
from smoke_site import DEFAULT_BIO, SmokeSite


@pytest.fixture
def site() -> Iterator[SmokeSite]:
    with SmokeSite() as s:
        yield s


def test_string_steps_and_upstream_playwright_syntax_parse_to_dicts() -> None:
    assert parse_step("goto [http://h/x]") == {"do": "goto", "url": "http://h/x"}
    assert parse_step("stop [42]") == {"do": "stop", "answer": "42"}
    assert parse_step('page.get_by_role("link", name="Forums").click()') == {"do": "click", "role": "link", "name": "Forums"}
    assert parse_step('page.get_by_label("Email").fill("a@b")') == {"do": "fill", "label": "Email", "value": "a@b"}
    assert parse_step('page.get_by_test_id("save").nth(1).click()') == {"do": "click", "test_id": "save", "nth": 1}
    assert parse_step('page.stop("done")') == {"do": "stop", "answer": "done"}
    for bad in ('page.evaluate("alert(1)")', 'os.system("x")', 'page.get_by_role(x).click()', {"do": "click"},
                {"do": "fill", "label": "x"}, {"do": "explode"}):
        with pytest.raises(RecipeError):
            parse_step(bad)
    with pytest.raises(RecipeError, match="end with a stop"):
        parse_recipe(["goto [http://h]"])


@pytest.mark.browser
def test_agent_fills_a_form_clicks_by_role_label_test_id_and_answers(browser: object, site: SmokeSite) -> None:
    recipe = [
        {"do": "goto", "url": site.url + "/account"},  # logged out: redirected to the sign-in form
        {"do": "fill", "label": "Email", "value": "emma@example.com"},
        {"do": "fill", "label": "Password", "value": "Password.123"},
        'page.get_by_role("button", name="Sign In").click()',
        {"do": "fill", "label": "Biography", "value": "Pro Python Developer"},
        {"do": "select", "label": "Visibility", "option": "private"},
        {"do": "click", "test_id": "save-bio"},
        {"do": "stop", "answer_from": {"css": ".user-bio"}},
    ]
    ctx = browser.new_context()  # type: ignore[attr-defined]
    try:
        agent = ReferenceAgent()
        page = agent.open_tabs(ctx, [site.url + "/"])
        traj, page = agent.run("t1", recipe, page)
        assert traj.ok, traj.error
        assert traj.answer == "Pro Python Developer"
        assert [s.url.replace(site.url, "") for s in traj.steps] == [
            "/login", "/login", "/login", "/account", "/account", "/account", "/user/emma", "/user/emma"]
        assert traj.steps[3].action == "click role='button' name='Sign In'"
        assert traj.steps[-1].action == "stop [Pro Python Developer]"
        assert all(s.screenshot and s.screenshot[:2] == b"\xff\xd8" for s in traj.steps)  # JPEG per step
        assert site.bio == "Pro Python Developer"

        task = task_from_config({"task_id": "t1", "sites": ["shopping"], "start_url": "__SHOPPING__", "intent": "bio",
                                 "eval": {"eval_types": ["string_match", "url_match", "program_html"],
                                          "reference_answers": {"exact_match": "pro python developer"},
                                          "reference_url": "__SHOPPING__/user/emma",
                                          "program_html": [{"url": "__SHOPPING__/user/emma",
                                                            "locator": "document.querySelector('.user-bio').outerText",
                                                            "required_contents": {"exact_match": "Pro Python Developer"}}]}},
                                {"SHOPPING": site.url})
        assert evaluate(task, traj.answer, page, env={"SHOPPING": site.url}).status == "pass"
        site.reset()
        ev = evaluate(task, traj.answer, page, env={"SHOPPING": site.url})
        assert ev.status == "fail" and ev.checks[-1].score == 0.0 and site.bio == DEFAULT_BIO
    finally:
        ctx.close()


@pytest.mark.browser
def test_agent_search_by_placeholder_press_and_multi_answer(browser: object, site: SmokeSite) -> None:
    ctx = browser.new_context()  # type: ignore[attr-defined]
    try:
        agent = ReferenceAgent(screenshots=False)
        page = agent.open_tabs(ctx, [site.url + "/", site.url + "/products"])
        assert len(ctx.pages) == 2 and page.url == site.url + "/"
        traj, page = agent.run("t2", [
            {"do": "fill", "placeholder": "Search entire store here...", "value": "bag"},
            {"do": "press", "key": "Enter", "placeholder": "Search entire store here..."},
            {"do": "stop", "answer_from": {"css": "li.hit"}, "join": " | "},
        ], page)
        assert traj.ok and traj.answer == "Joust Bag" and traj.final_url == site.url + "/search?q=bag"
        traj, page = agent.run("t3", ["tab_focus [1]", 'page.get_by_role("link", name="Overnight Duffle").click()',
                                      {"do": "stop", "answer_from": {"css": ".price"}}], page)
        assert traj.answer == "$45.00" and traj.final_url == site.url + "/products/2"
        assert traj.steps[0].screenshot is None
    finally:
        ctx.close()


@pytest.mark.browser
def test_a_failing_step_ends_the_episode_with_an_error(browser: object, site: SmokeSite) -> None:
    ctx = browser.new_context()  # type: ignore[attr-defined]
    try:
        agent = ReferenceAgent(step_timeout_ms=1500, screenshots=False)
        page = agent.open_tabs(ctx, [site.url + "/"])
        traj, _ = agent.run("t4", [{"do": "click", "role": "button", "name": "No such button"}, "stop [never]"], page)
        assert not traj.ok and "step 0" in (traj.error or "") and traj.answer == "" and len(traj.steps) == 1
        assert traj.steps[0].ok is False and "Timeout" in (traj.steps[0].error or "")
    finally:
        ctx.close()
