"""envctl command line: thin Click commands that call the library (``envctl.Lab`` and the public
``envctl.images`` / ``envctl.cloud`` / ``envctl.smoke`` / ``envctl.leases`` APIs) and render the result.

The root group, the error boundary and the shared options are in :mod:`envctl.cli.core`; each module
here registers one family of commands on it.
"""
from __future__ import annotations

from envctl.cli import cloud, images, lifecycle, serving, sites, smoke, state, tasks  # noqa: F401 - they register commands
from envctl.cli.core import cli

__all__ = ["cli", "main"]


def main() -> None:
    cli(prog_name="envctl")
