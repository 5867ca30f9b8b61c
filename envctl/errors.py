"""One error hierarchy for envctl. Messages say what is wrong and how to fix it.

The library raises these and never prints or exits; ``envctl.cli`` maps them to exit codes.
"""
from __future__ import annotations

import difflib
from typing import Iterable


class EnvctlError(Exception):
    """Base of every error envctl reports to a user. ``hint`` says what to do about it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message


class UsageError(EnvctlError):
    exit_code = 2


class Terminated(KeyboardInterrupt):
    """SIGTERM (a script's ``kill``, a CI runner or a service manager stopping envctl): raised in the main
    thread by the CLI's handler, so it unwinds exactly as Ctrl-C does (every ``except KeyboardInterrupt``
    and ``finally`` runs: a copy being booted is removed, a frozen site unpaused, a pool stopped)."""


class MissingExtra(UsageError):
    """An optional part of envctl whose Python packages are not installed (``pip install 'envctl[EXTRA]'``)."""

    def __init__(self, extra: str, what: str, module: str) -> None:
        super().__init__(f"{what} needs envctl's '{extra}' extra (the Python module {module} is not installed)",
                         f"pip install 'envctl[{extra}]'")


def need_extra(extra: str, what: str, *modules: str) -> None:
    """Raise :class:`MissingExtra` unless every module of ``modules`` can be imported."""
    import importlib.util

    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(extra, what, module)


class CatalogError(UsageError):
    """The site catalog is malformed. ``problems`` holds one line per problem found."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path, self.problems = path, problems
        head = problems[0] if len(problems) == 1 else f"{len(problems)} problems: " + " | ".join(problems)
        super().__init__(f"invalid catalog {path}: {head}", "fix the file, or unset ENVCTL_CATALOG / --catalog to use the built-in one")


class UnknownSite(UsageError, KeyError):
    def __init__(self, name: str, known: Iterable[str], kind: str = "site") -> None:
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=1)
        guess = f"; did you mean '{close[0]}'?" if close else ""
        super().__init__(f"unknown {kind} '{name}'{guess}", f"known {kind}s: {', '.join(known)}")

    __str__ = EnvctlError.__str__


class EngineUnavailable(EnvctlError):
    """The Docker engine (or a swarm node's) is down, unreachable or does not answer in time."""

    def __init__(self, detail: str = "", hint: str | None = None) -> None:
        super().__init__(
            "Docker engine is not reachable" + (f" ({detail})" if detail else ""),
            hint or ("start it with 'sudo scripts/docker-engine.sh' (or 'sudo systemctl start docker'); a daemon "
                     "that stopped answering is restarted with 'sudo systemctl restart docker'"),
        )


class DockerError(EnvctlError):
    """A docker command failed; carries the command and the tail of its output."""


class ImageMissing(EnvctlError):
    pass


class BuildFailed(EnvctlError):
    pass


class PortInUse(EnvctlError):
    pass


class NotReady(EnvctlError):
    """A site did not become healthy before its deadline."""


class LoginFailed(EnvctlError):
    pass


class NoBrowser(LoginFailed):
    """No browser to log in with on this machine (Playwright or Chromium missing), e.g. a lab host.
    A reset still ends pristine; only its login files are not renewed."""


class ResetFailed(EnvctlError):
    pass


class FetchError(EnvctlError):
    pass


class ChecksumMismatch(FetchError):
    pass


class DiskSpaceError(EnvctlError):
    pass


class PlaybookFailed(EnvctlError):
    pass


class CloudError(EnvctlError):
    pass


class NoSuchInstance(EnvctlError):
    """The named instance does not exist (no proxy, no network) on this engine."""

    def __init__(self, instance: str) -> None:
        super().__init__(f"instance '{instance}' does not exist on this Docker engine",
                         "start it with 'envctl up --instance NAME', or see 'envctl instances'")
        self.instance = instance


class SiteNotUp(UsageError):
    def __init__(self, site: str, instance: str) -> None:
        super().__init__(f"site '{site}' is not up in instance '{instance}'", f"run 'envctl up {site}'")
