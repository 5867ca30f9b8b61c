"""Headless Chromium for logins: which binary, which flags.

The browser is Debian's ``chromium`` by default (``playwright install`` needs a download we do
not make); ``ENVCTL_CHROMIUM`` names another executable, and an empty value means Playwright's
own bundled build.
"""
from __future__ import annotations

import os
import shutil
from typing import Any

ARGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage")


def executable() -> str | None:
    env = os.environ.get("ENVCTL_CHROMIUM")
    if env is not None:
        return env or None
    for name in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if os.path.exists(name):
            return name
    return shutil.which("chromium")


def launch_kwargs() -> dict[str, Any]:
    kwargs: dict[str, Any] = {"headless": True, "args": list(ARGS)}
    exe = executable()
    if exe:
        kwargs["executable_path"] = exe
    return kwargs


async def launch(playwright: Any) -> Any:
    from envctl.errors import EnvctlError

    try:
        return await playwright.chromium.launch(**launch_kwargs())
    except Exception as exc:  # playwright raises its own Error with the launch log
        raise EnvctlError(f"cannot start Chromium ({executable() or 'Playwright bundled build'}): "
                          f"{str(exc).splitlines()[0]}",
                          "install Debian's chromium (apt-get install chromium) or set ENVCTL_CHROMIUM "
                          "to a Chromium executable") from None
