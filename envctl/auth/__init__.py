"""Login state: Playwright ``storage_state`` files for every site, valid by the upstream probes.

Python API::

    from envctl.auth import login_sites, login, check, Target
    paths = login_sites(lab, ["gitlab", "reddit"])   # {"gitlab_state.json": Path, ...}; raises on failure
    report = login(Target.of_lab(lab), None)         # every login site that is up; never raises per file
    report = check(Target.of_lab(lab))               # probe existing files, no login

File names follow upstream ``auto_login.py`` (see :mod:`envctl.auth.files`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from envctl.auth.errors import AuthError, LoginPageChanged, SiteDown, StateRejected, WrongCredentials
from envctl.auth.files import combo_of, login_combos, parse_duration, state_name
from envctl.auth.run import FileResult, Report, Target, check, login
from envctl.errors import LoginFailed

__all__ = ["login_sites", "login", "check", "Target", "Report", "FileResult", "login_combos", "state_name",
           "combo_of", "parse_duration", "LoginFailed", "AuthError", "SiteDown", "WrongCredentials", "LoginPageChanged", "StateRejected"]


def login_sites(lab: Any, sites: Iterable[str] | None = None, *, out: str | Path | None = None,
                max_age: float | None = None, parallel: int | None = None, timeout: float = 30.0,
                extra_headers: dict[str, str] | None = None, http: bool = False) -> dict[str, Path]:
    """Log ``sites`` of ``lab`` (or of a :class:`Target`) in and return ``{file name: path}`` of every file written or kept.

    Files touching the sites are made: each site alone and each upstream pair with another site
    that is up; where the flavor logs in by header, the headers file too (a header refused raises). Raises :class:`LoginFailed` naming every file that could not be made (the others
    are still written). ``http``: files whose sites all declare ``login.http`` are made with a form
    post and checked over HTTP, without a browser (what resets use)."""
    kwargs: dict[str, Any] = {"max_age": max_age, "timeout": timeout, "http": http}
    if parallel:
        kwargs["parallel"] = parallel
    target = lab if isinstance(lab, Target) else Target.of_lab(lab, out, extra_headers)
    report = login(target, sites, **kwargs)
    bad = report.failures() + ([report.headers] if report.headers and not report.headers.ok else [])
    if bad:
        raise LoginFailed("login failed for " + "; ".join(f.error or f.name for f in bad),
                          bad[0].hint or "see 'envctl login --check'")
    return report.paths()
