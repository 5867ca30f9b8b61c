"""What the benches share: a percentile and a free local port (each bench prints, none asserts)."""
from __future__ import annotations

import socket


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100, nearest rank) of ``values``; nan for none."""
    s = sorted(values)
    if not s:
        return float("nan")
    return s[max(0, min(len(s) - 1, round(p / 100 * (len(s) - 1))))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
