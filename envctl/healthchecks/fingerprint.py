"""State fingerprints: the catalog's queries, run inside a site copy's members (by ``Instance.fingerprint``), hashed.

A fingerprint is the SHA-256 of every query's output (``name`` then output), plus the outputs
themselves so that ``verify`` can say which query differs and how.
"""
from __future__ import annotations

import base64
import hashlib
import threading
import json
from dataclasses import dataclass, field


@dataclass
class Fingerprint:
    digest: str
    parts: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"digest": self.digest, "parts": self.parts}, sort_keys=True)

    def to_label(self) -> str:
        return base64.b64encode(self.to_json().encode()).decode()

    @classmethod
    def from_json(cls, text: str) -> "Fingerprint":
        if not text.lstrip().startswith("{"):
            text = base64.b64decode(text).decode()
        raw = json.loads(text)
        return cls(raw["digest"], raw.get("parts", {}))


_computed = [0]
_computed_lock = threading.Lock()


def computed() -> int:
    """How many fingerprints this process has computed (a pool's /metrics shows it: verifications it paid for)."""
    return _computed[0]


def hashed(outputs: dict[str, str]) -> Fingerprint:
    """The fingerprint of the site's query outputs (query name -> what it printed; lines right-stripped, the
    whole stripped); no query at all hashes to a constant."""
    with _computed_lock:
        _computed[0] += 1
    parts = {name: "\n".join(line.rstrip() for line in out.strip().splitlines()) for name, out in outputs.items()}
    h = hashlib.sha256()
    for name in sorted(parts):
        h.update(name.encode() + b"\0" + parts[name].encode() + b"\0")
    return Fingerprint(h.hexdigest(), parts)


def diff(expected: Fingerprint, actual: Fingerprint) -> list[str]:
    """Human-readable differences, one line per changed output line."""
    out: list[str] = []
    for name in sorted(set(expected.parts) | set(actual.parts)):
        a = expected.parts.get(name, "").splitlines()
        b = actual.parts.get(name, "").splitlines()
        if a == b:
            continue
        for i in range(max(len(a), len(b))):
            la = a[i] if i < len(a) else "<none>"
            lb = b[i] if i < len(b) else "<none>"
            if la != lb:
                out.append(f"{name}: expected {la!r}, found {lb!r}")
    return out


def mismatch(expected: Fingerprint | None, actual: Fingerprint) -> str:
    """'' when ``actual`` is the pristine state ``expected``, else why not (the one such check)."""
    if expected is None:
        return "no pristine fingerprint recorded (bring the site up fresh or reset it)"
    if expected.digest == actual.digest:
        return ""
    return "fingerprint differs: " + "; ".join(diff(expected, actual)[:3])
