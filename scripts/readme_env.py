"""Write README's table of environment variables from ``envctl.validate.ENV_VARS`` (between the
``<!-- env-vars:begin -->`` / ``<!-- env-vars:end -->`` markers). ``--check``: exit 1 when README's
table differs (tests/test_drills_io.py checks the same)."""
from __future__ import annotations

import sys
from pathlib import Path

from envctl.validate import ENV_TABLE_BEGIN, ENV_TABLE_END, env_table

README = Path(__file__).resolve().parents[1] / "README.md"


def render(text: str) -> str:
    head, sep, rest = text.partition(ENV_TABLE_BEGIN)
    _, sep2, tail = rest.partition(ENV_TABLE_END)
    if not sep or not sep2:
        raise SystemExit(f"{README}: the markers {ENV_TABLE_BEGIN} ... {ENV_TABLE_END} are missing")
    return head + env_table() + tail


def main() -> int:
    text = README.read_text()
    new = render(text)
    if "--check" in sys.argv[1:]:
        if new != text:
            print("README's environment table differs from envctl.validate.ENV_VARS: run python scripts/readme_env.py")
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
