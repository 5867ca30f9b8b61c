"""The LLM judge for fuzzy_match and N/A answers, over any OpenAI-compatible chat endpoint.

Used only when configured (``Judge.from_env()`` returns None otherwise); evaluators then report
such checks as skipped ("needs judge"). The prompts follow the structure of WebArena's
``llm_fuzzy_match`` / ``llm_ua_match`` (verdict words correct/incorrect/partially correct and
same/different); upstream hard-codes ``gpt-4-1106-preview``, here the model is configurable.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import requests

from envctl.errors import EnvctlError
from envctl.validate import env_value


class JudgeError(EnvctlError):
    """The judge endpoint failed or answered without a verdict."""


def chat_completion(base_url: str, api_key: str | None, model: str, messages: list[dict[str, str]], *,
                    temperature: float = 0.0, max_tokens: int = 768, timeout: float = 120.0) -> str:
    """POST ``{base_url}/chat/completions`` and return the first choice's text."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    url = base_url.rstrip("/") + "/chat/completions"
    try:
        r = requests.post(url, headers=headers, timeout=timeout, json={
            "model": model, "messages": messages, "temperature": temperature, "top_p": 1.0, "max_tokens": max_tokens})
    except requests.RequestException as exc:
        raise JudgeError(f"chat endpoint {url} unreachable: {exc}", hint="check the base URL and that the server runs") from exc
    if r.status_code != 200:
        raise JudgeError(f"chat endpoint {url} answered HTTP {r.status_code}: {r.text[:200]}",
                         hint="check the model name and API key")
    try:
        return str(r.json()["choices"][0]["message"]["content"] or "")
    except (ValueError, KeyError, IndexError) as exc:
        raise JudgeError(f"chat endpoint {url} returned no choices", hint="is it OpenAI-compatible?") from exc


@dataclass(frozen=True)
class Judge:
    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 120.0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Judge | None:
        """``ENVCTL_JUDGE_BASE_URL`` + ``ENVCTL_JUDGE_MODEL`` (+ ``ENVCTL_JUDGE_API_KEY``), else None."""
        e = os.environ if environ is None else environ
        base, model = env_value("ENVCTL_JUDGE_BASE_URL", e), env_value("ENVCTL_JUDGE_MODEL", e)
        if not base or not model:
            return None
        return cls(base_url=base, model=model, api_key=env_value("ENVCTL_JUDGE_API_KEY", e))

    def _ask(self, prompt: str) -> str:
        messages = [{"role": "system", "content": "You are a helpful assistant"}, {"role": "user", "content": prompt}]
        return chat_completion(self.base_url, self.api_key, self.model, messages, timeout=self.timeout).lower()

    def fuzzy_match(self, *, pred: str, reference: str, question: str) -> bool:
        reply = self._ask(
            "You help a teacher grade a student's answer to a question. The student may phrase the answer "
            "differently; judge whether it is semantically equivalent to the reference answer.\n"
            f"question: {question}\nreference answer: {reference}\n"
            "the string 'N/A' anywhere means 'not achievable'\n"
            f"student answer: {pred}\n"
            "Conclude with one of: correct / incorrect / partially correct.")
        if "partially correct" in reply or "incorrect" in reply:
            return False
        if "correct" in reply:
            return True
        raise JudgeError(f"judge reply has no verdict: {reply[:120]!r}", hint="use a stronger judge model")

    def ua_match(self, *, pred: str, reference: str, question: str) -> bool:
        reply = self._ask(
            "Task_1 cannot be completed for the reason given in Reason_1. Someone attempted it and "
            "reported the attempt in Report_1. Does Report_1 refer to Reason_1, even implicitly? "
            "Answer same if it does, different otherwise.\n"
            f"Task_1 = {question}\nReason_1 = {reference}\nReport_1 = {pred}\nreturn [same] or [different]")
        if "different" in reply:
            return False
        if "same" in reply:
            return True
        raise JudgeError(f"judge reply has no verdict: {reply[:120]!r}", hint="use a stronger judge model")
