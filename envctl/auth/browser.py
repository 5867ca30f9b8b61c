"""Headless Chromium for logins: which binary, which flags.

The browser is Debian's ``chromium`` by default (``playwright install`` needs a download we do
not make); ``ENVCTL_CHROMIUM`` names another executable, and an empty value means Playwright's
own bundled build.
"""
from __future__ import annotations

import os
import shutil
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

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


@asynccontextmanager
async def async_playwright() -> AsyncIterator[Any]:
    """Playwright's async entry point; :class:`NoBrowser` when Playwright is not installed or its
    driver cannot start (e.g. a host missing the driver's shared libraries)."""
    from envctl.errors import NoBrowser

    hint = "pip install 'envctl[browser]', and install Debian's chromium (apt-get install chromium)"
    try:
        from playwright.async_api import async_playwright as start
    except ImportError:
        raise NoBrowser("a browser login needs envctl's 'browser' extra (the Python module playwright is not installed)",
                        hint) from None
    cm = start()
    try:
        pw = await cm.__aenter__()
    except Exception as exc:  # noqa: BLE001 - the driver's own error, named in the message
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NoBrowser(f"cannot start Playwright's driver: {first}", hint) from None
    try:
        yield pw
    finally:
        await cm.__aexit__(None, None, None)  # Playwright's exit stops the driver; it swallows nothing


async def launch(playwright: Any) -> Any:
    from envctl.errors import NoBrowser

    try:
        return await playwright.chromium.launch(**launch_kwargs())
    except Exception as exc:  # playwright raises its own Error with the launch log
        raise NoBrowser(f"cannot start Chromium ({executable() or 'Playwright bundled build'}): "
                          f"{str(exc).splitlines()[0]}",
                          "install Debian's chromium (apt-get install chromium) or set ENVCTL_CHROMIUM "
                          "to a Chromium executable") from None
