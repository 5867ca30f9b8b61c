"""Where an image comes from: registry pulls, tarballs (mirrors, resume, sha256, streamed into
``docker load``), data archives, and the images envctl builds itself.

The public API (what ``envctl images`` calls)::

    from envctl.images import get_images, plan_get, list_images, verify_images, build_for_sites
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    "build_for_sites": "envctl.images.build",
    "get_images": "envctl.images.get", "list_images": "envctl.images.get", "verify_images": "envctl.images.get",
    "export_image": "envctl.images.get", "import_image": "envctl.images.get", "prune": "envctl.images.get",
    "Options": "envctl.images.get", "plan_get": "envctl.images.get",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # lazy: importing the package must not import Docker wrappers
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
