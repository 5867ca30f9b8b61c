"""WebArena's evaluators re-implemented (research/evaluation.md §2): string_match, url_match, program_html.

Semantics follow the upstream harness exactly, quirks included (no ``|OR|`` splitting in string_match,
``GOLD in PRED`` substring URL matching with a union of query keys, tokenised membership only for a
single one-character must_include reference). ``func:`` helpers are a whitelist parsed with ``ast``,
never ``eval``. LLM-judged checks (fuzzy_match, N/A unachievable-match) run only with a configured
judge; without one the check is skipped ("needs judge"), never passed.
"""
from __future__ import annotations

import ast
import html
import operator
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import parse_qs, urlparse

import requests

if TYPE_CHECKING:  # pragma: no cover
    from playwright.sync_api import Page

    from envctl.smoke.judge import Judge
    from envctl.smoke.tasks import Task

NEEDS_JUDGE = "needs judge"


@dataclass(frozen=True)
class Check:
    """One scored comparison. ``score`` is 1.0/0.0, or None when the check was skipped."""

    name: str
    score: float | None
    detail: str


@dataclass
class Evaluation:
    """All checks of one task; the task's score is their product (all-or-nothing, as upstream)."""

    checks: list[Check] = field(default_factory=list)

    @property
    def score(self) -> float | None:
        """0.0 if any check failed, None if none failed but one was skipped, else 1.0."""
        if any(c.score == 0 for c in self.checks):
            return 0.0
        if any(c.score is None for c in self.checks):
            return None
        result = 1.0
        for c in self.checks:
            result *= c.score or 0.0
        return result

    @property
    def status(self) -> str:
        s = self.score
        return "skip" if s is None else ("pass" if s == 1.0 else "fail")

    @property
    def reason(self) -> str:
        bad = [c for c in self.checks if c.score == 0] or [c for c in self.checks if c.score is None]
        return "; ".join(f"{c.name}: {c.detail}" for c in bad) if bad else "all checks passed"


# ---------------------------------------------------------------- string_match (§2.1)

def clean_answer(answer: str) -> str:
    """strip(); drop one pair of surrounding quotes (' or "); lower(). Nothing else."""
    answer = answer.strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "'\"":
        answer = answer[1:-1]
    return answer.lower()


_TOKEN_RE = re.compile(r"\d+(?:[.,:/]\d+)*|\w+(?:[-'’]\w+)*|\.\.\.|[^\w\s]")


def word_tokenize(text: str) -> list[str]:
    """nltk's ``word_tokenize(text, preserve_line=True)`` when nltk is installed, else an approximation.

    The approximation keeps numbers with inner separators whole (``0.00``, ``1,000``) and splits
    other punctuation off as tokens, which is what decides the single-character references the
    tokenised rule is used for (``"0"`` vs ``"$0.00"`` -> ``['$', '0.00']``).
    """
    try:
        from nltk.tokenize import word_tokenize as nltk_tokenize

        return list(nltk_tokenize(text, preserve_line=True))
    except ImportError:
        return _TOKEN_RE.findall(text)


def exact_match(ref: str, pred: str) -> float:
    return float(clean_answer(pred) == clean_answer(ref))


def must_include(ref: str, pred: str, tokenize: bool = False) -> float:
    clean_ref, clean_pred = clean_answer(ref), clean_answer(pred)
    if tokenize and len(clean_ref) == 1:
        return float(clean_ref in word_tokenize(clean_pred))
    return float(clean_ref in clean_pred)


def string_match_checks(reference_answers: dict[str, Any], answer: str, *, intent: str = "",
                        string_note: str = "", judge: Judge | None = None) -> list[Check]:
    """The StringEvaluator: every key of ``reference_answers`` is applied (product)."""
    pred = clean_answer(answer)
    checks: list[Check] = []
    for kind, value in reference_answers.items():
        if kind == "exact_match":
            s = exact_match(value, pred)
            checks.append(Check("string_match.exact_match", s, f"answer {answer!r} vs {value!r}"))
        elif kind == "must_include":
            items = list(value)
            missing = [r for r in items if not must_include(r, pred, tokenize=len(items) == 1)]
            checks.append(Check("string_match.must_include", 0.0 if missing else 1.0,
                                f"answer {answer!r} lacks {missing!r}" if missing else f"answer includes {items!r}"))
        elif kind == "fuzzy_match":
            checks.append(_fuzzy_check(value, pred, answer, intent=intent, string_note=string_note, judge=judge))
        else:
            raise ValueError(f"unknown reference_answers key {kind!r}")
    return checks


def _fuzzy_check(value: Any, pred: str, answer: str, *, intent: str, string_note: str,
                 judge: Judge | None) -> Check:
    name = "string_match.fuzzy_match"
    if value == "N/A":
        if exact_match("N/A", pred):
            return Check(name, 1.0, "answer is exactly N/A")
        if judge is None:
            return Check(name, None, f"{NEEDS_JUDGE}: answer {answer!r} is not 'N/A'")
        ok = judge.ua_match(pred=pred, reference=string_note, question=intent)
        return Check(name, float(ok), f"judge (unachievable) says {'same' if ok else 'different'}")
    if judge is None:
        return Check(name, None, f"{NEEDS_JUDGE}: fuzzy references {value!r}")
    failed = [r for r in value if not judge.fuzzy_match(pred=pred, reference=r, question=intent)]
    return Check(name, 0.0 if failed else 1.0,
                 f"judge rejected {answer!r} for {failed!r}" if failed else "judge accepted the answer")


# ---------------------------------------------------------------- url_match (§2.2)

def url_match(reference_url: str, pred_url: str, url_note: str = "GOLD in PRED") -> float:
    """URLEvaluator: ref base path is a substring of pred's netloc+path; query keys of ALL refs must match.

    ``url_note: EXACT`` (VisualWebArena's default) is VWA's URLExactEvaluator: ``localhost`` -> ``127.0.0.1``,
    one trailing ``/`` stripped, the prediction must equal one of the ``|OR|`` alternatives.
    """
    if url_note == "EXACT":
        def norm(u: str) -> str:
            u = u.strip().replace("localhost", "127.0.0.1")
            return u[:-1] if u.endswith("/") else u
        return float(norm(pred_url) in [norm(r) for r in reference_url.split(" |OR| ")])
    if url_note != "GOLD in PRED":
        raise ValueError(f"unknown url_note {url_note!r}")
    pred = pred_url.rstrip("/")
    refs = [u.rstrip("/") for u in reference_url.split(" |OR| ")]
    pred_parts = urlparse(pred)
    pred_base = pred_parts.netloc + pred_parts.path
    pred_query = parse_qs(pred_parts.query)
    ref_bases: list[str] = []
    ref_queries: dict[str, set[str]] = {}
    for ref in refs:
        parts = urlparse(ref)
        ref_bases.append(parts.netloc + parts.path)
        for k, vs in parse_qs(parts.query).items():
            ref_queries.setdefault(k, set()).update(vs)
    base_score = float(any(b in pred_base for b in ref_bases))
    query_score = 1.0
    for k, possible in ref_queries.items():
        query_score *= float(any(v in pred_query.get(k, []) for v in possible))
    return base_score * query_score


# ---------------------------------------------------------------- program_html (§2.3)

def required_contents_check(required: dict[str, Any], selected: str) -> tuple[float | None, str]:
    """Compare the selected page content with one target's ``required_contents``."""
    if len(required) != 1:
        raise ValueError(f"required_contents needs exactly one key, got {sorted(required)}")
    kind, value = next(iter(required.items()))
    shown = selected if len(selected) <= 160 else selected[:157] + "..."
    if kind == "exact_match":
        s = exact_match(value, selected)
        return s, f"{shown!r} vs exact {value!r}"
    if kind == "must_include":
        missing = [v for v in value if not any(must_include(alt, selected) for alt in v.split(" |OR| "))]
        return (0.0 if missing else 1.0), (f"{shown!r} lacks {missing!r}" if missing else f"includes {value!r}")
    if kind == "must_exclude":  # VisualWebArena
        present = [v for v in value if any(must_include(alt, selected) for alt in v.split(" |OR| "))]
        return (0.0 if present else 1.0), (f"{shown!r} contains {present!r}" if present else f"excludes {value!r}")
    if kind == "required_values":  # VisualWebArena numeric comparisons
        return _required_values(value, selected), f"{shown!r} vs {value!r}"
    if kind == "fuzzy_match":
        return None, f"{NEEDS_JUDGE}: fuzzy program_html content"
    raise ValueError(f"unknown required_contents key {kind!r}")


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": lambda a, b: abs(a - b) < 1e-8, "<": operator.lt, ">": operator.gt}


def _required_values(items: list[str], selected: str) -> float:
    try:
        number = float(int(selected.replace(",", "").strip()))
    except ValueError:
        return 0.0
    for item in items:
        ok = False
        for alt in item.split(" |OR| "):
            m = re.fullmatch(r"\s*(<=|>=|==|<|>)\s*(-?[\d.]+)\s*", alt)
            if m and _OPS[m.group(1)](number, float(m.group(2))):
                ok = True
        if not ok:
            return 0.0
    return 1.0


def parse_helper_call(expr: str) -> tuple[str, list[Any]]:
    """``name(arg, ...)`` with literal or ``__page__`` arguments -> (name, args). Nothing is evaluated."""
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"cannot parse helper call {expr!r}") from exc
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.keywords:
        raise ValueError(f"helper expression must be a plain call: {expr!r}")
    args: list[Any] = []
    for a in node.args:
        if isinstance(a, ast.Name) and a.id == "__page__":
            args.append(PAGE)
        elif isinstance(a, ast.Constant):
            args.append(a.value)
        else:
            raise ValueError(f"helper arguments must be literals or __page__: {expr!r}")
    return node.func.id, args


PAGE = object()  # marker for the ``__page__`` argument


class Helpers:
    """The whitelisted ``func:`` helpers of WebArena / VisualWebArena program_html targets."""

    def __init__(self, env: dict[str, str], timeout: float = 20.0, rest_admin: tuple[str, str] | None = None) -> None:
        self.env, self.timeout = env, timeout
        self._rest_admin = rest_admin

    @property
    def rest_admin(self) -> tuple[str, str]:
        """The store's REST admin (upstream's browser_env/env_config.py): the catalog's 'rest-admin' account."""
        if self._rest_admin is None:
            from envctl.catalog import load_catalog

            account = load_catalog().account_with_role("rest-admin")
            if account is None:
                raise ValueError("the catalog has no account with role 'rest-admin'; the shopping REST helpers need one")
            self._rest_admin = (account.username, account.password)
        return self._rest_admin

    # url helpers
    def reddit_get_post_url(self, url: str) -> str:
        parts = urlparse(url)
        tokens = parts.path.split("/")
        if len(tokens) < 4 or tokens[1] != "f":
            return url
        return f"{parts.scheme}://{parts.netloc}/f/{tokens[2]}/{tokens[3]}/"

    def shopping_get_latest_order_url(self) -> str:
        params = {"searchCriteria[sortOrders][0][field]": "created_at",
                  "searchCriteria[sortOrders][0][direction]": "DESC", "searchCriteria[pageSize]": "1"}
        r = self._shopping_get("/rest/V1/orders", params)
        order_id = int(r["items"][0]["increment_id"])
        return f"{self._shopping()}/sales/order/view/order_id/{order_id}/"

    # locator helpers
    def get_query_text(self, page: Page, selector: str) -> str:
        try:
            return str(page.evaluate("(s) => { const e = document.querySelector(s); return e ? e.textContent : ''; }",
                                     selector))
        except Exception:
            return ""

    def get_query_text_lowercase(self, page: Page, selector: str) -> str:
        return self.get_query_text(page, selector).lower()

    def gitlab_get_project_memeber_role(self, page: Page, account_name: str) -> str:
        js = """(name) => {
            const accounts = document.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel");
            for (let i = 0; i < accounts.length; i++) {
                if (accounts[i].outerText === '@' + name) {
                    return document.querySelectorAll("td.col-max-role span")[i].outerText;
                }
            }
            return '';
        }"""
        try:
            return str(page.evaluate(js, account_name))
        except Exception:
            return ""

    def shopping_get_sku_latest_review_author(self, sku: str) -> str:
        reviews = self._shopping_get(f"/rest/V1/products/{sku}/reviews")
        return str(reviews[-1]["nickname"]) if reviews else ""

    def shopping_get_sku_latest_review_rating(self, sku: str) -> str:
        reviews = self._shopping_get(f"/rest/V1/products/{sku}/reviews")
        return str(reviews[-1]["ratings"][0]["percent"]) if reviews else ""

    def _shopping(self) -> str:
        base = self.env.get("SHOPPING")
        if not base:
            raise ValueError("SHOPPING is not set; the shopping REST helpers need it")
        return base.rstrip("/")

    def _shopping_get(self, path: str, params: dict[str, str] | None = None) -> Any:
        user, password = self.rest_admin
        token = requests.post(f"{self._shopping()}/rest/default/V1/integration/admin/token",
                              json={"username": user, "password": password}, timeout=self.timeout).json()
        r = requests.get(f"{self._shopping()}{path}", params=params, timeout=self.timeout,
                         headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        r.raise_for_status()
        return r.json()

    def call(self, expr: str, page: Page | None = None) -> Any:
        name, args = parse_helper_call(expr)
        fn = getattr(self, name, None) if not name.startswith("_") and name != "call" else None
        if fn is None:
            raise UnsupportedHelper(name)
        return fn(*[page if a is PAGE else a for a in args])


class UnsupportedHelper(ValueError):
    """A ``func:`` helper envctl does not implement (the check is skipped, not guessed)."""


def _settle(page: Page, timeout_ms: int) -> None:
    """Upstream sleeps 3 s after goto; wait for load and a quiet network instead (bounded)."""
    try:
        page.wait_for_load_state("networkidle", timeout=timeout_ms)
    except Exception:
        pass


def program_html_checks(targets: list[dict[str, Any]], page: Page, *, helpers: Helpers,
                        settle_ms: int = 3000) -> list[Check]:
    """HTMLContentEvaluator. Non-``last`` URLs open in a new tab of the agent's context (libwebarena)."""
    checks: list[Check] = []
    for i, target in enumerate(targets):
        name = f"program_html[{i}]"
        url: str = target.get("url", "last")
        if url.startswith("func:"):
            try:
                url = str(helpers.call(url[len("func:"):].replace("__last_url__", page.url)))
            except UnsupportedHelper as exc:
                checks.append(Check(name, None, f"unsupported url helper {exc}"))
                continue
        view = page
        opened = None
        try:
            if url != "last":
                opened = view = page.context.new_page()
                view.goto(url, wait_until="load")
                _settle(view, settle_ms)
            try:
                selected = _select(target, view, helpers)
            except UnsupportedHelper as exc:
                checks.append(Check(name, None, f"unsupported locator helper {exc}"))
                continue
            if selected is None:  # VWA: a helper returning None fails the task
                checks.append(Check(name, 0.0, f"locator {target.get('locator')!r} returned nothing at {view.url}"))
                continue
            score, detail = required_contents_check(target["required_contents"], html.unescape(selected))
            checks.append(Check(name, score, f"at {view.url}: {detail}"))
        finally:
            if opened is not None:
                opened.close()
    return checks


def _select(target: dict[str, Any], page: Page, helpers: Helpers) -> str | None:
    locator: str = target.get("locator", "")
    if not locator.strip():
        return page.content()
    if locator.startswith("document.") or locator.startswith("[...document."):
        for prep in target.get("prep_actions", []) or []:
            try:
                page.evaluate("() => " + prep)
            except Exception:
                pass
        try:
            return str((page.evaluate("() => " + locator)))
        except Exception:
            return ""
    if locator.startswith("lambda:"):  # VWA: a JS function body evaluated as is
        try:
            return str((page.evaluate(locator[len("lambda:"):])))
        except Exception:
            return ""
    if locator.startswith("func:"):
        result = helpers.call(locator[len("func:"):], page)
        return None if result is None else str(result)
    raise ValueError(f"unknown locator {locator!r}")


# ---------------------------------------------------------------- router (§2.0)

def evaluate(task: Task, answer: str, page: Page | None, *, env: dict[str, str],
             judge: Judge | None = None) -> Evaluation:
    """Score a finished episode: ``answer`` is the final stop text, ``page`` the tab current at stop."""
    ev = task.eval
    result = Evaluation()
    for kind in task.eval_types:
        if kind == "string_match":
            result.checks += string_match_checks(ev.get("reference_answers") or {}, answer, intent=task.intent,
                                                 string_note=ev.get("string_note", ""), judge=judge)
        elif kind == "url_match":
            pred = page.url if page is not None else ""
            ref = ev.get("reference_url") or ""
            s = url_match(ref, pred, ev.get("url_note", "GOLD in PRED"))
            result.checks.append(Check("url_match", s, f"{pred!r} vs {ref!r}"))
        elif kind == "program_html":
            if page is None:
                result.checks.append(Check("program_html", 0.0, "no page to evaluate"))
            else:
                result.checks += program_html_checks(ev.get("program_html") or [], page, helpers=Helpers(env))
        else:
            result.checks.append(Check(kind, None, f"eval type {kind} needs a vision model; not supported"))
    if not result.checks:
        result.checks.append(Check("config", 0.0, "task has no eval_types"))
    return result
