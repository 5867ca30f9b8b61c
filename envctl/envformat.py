"""Render an instance's URLs in the shapes harnesses read.

- ``shell`` / ``dotenv``: WebArena (or VisualWebArena) names, no trailing slashes;
- ``json``: both benchmarks' names plus per-site URLs;
- ``browsergym``: ``WA_*`` and ``VWA_*`` copies, and ``WA_FULL_RESET`` / ``VWA_FULL_RESET`` when a
  reset server (``envctl serve``) runs for the instance;
- ``agentlab``: a JSON list, one entry per running instance, with AgentLab's lower-case fields.
"""
from __future__ import annotations

import json
import shlex
from typing import Any

from envctl.lab import Lab


def reset_server_url(lab: Lab) -> str | None:
    try:
        from envctl.serve import running_server_url
    except ImportError:
        return None
    return running_server_url(lab.instance)


def env_json(lab: Lab) -> dict[str, Any]:
    settings = lab.settings()
    return {"instance": lab.instance, "running": settings is not None, "sites_up": lab.sites_up() if settings else [],
            "webarena": lab.env("webarena"), "visualwebarena": lab.env("visualwebarena"),
            "full_reset": reset_server_url(lab)}


def browsergym(lab: Lab) -> dict[str, str]:
    out = {f"WA_{k}": v for k, v in lab.env("webarena").items()}
    out.update({f"VWA_{k}": v for k, v in lab.env("visualwebarena").items() if k != "DATASET"})
    reset = reset_server_url(lab)
    if reset:
        out["WA_FULL_RESET"] = reset
        out["VWA_FULL_RESET"] = reset
    return out


def agentlab() -> list[dict[str, Any]]:
    out = []
    for inst in Lab.instances():
        wa = inst["webarena"]
        out.append({"instance": inst["instance"], "shopping": wa.get("SHOPPING"), "shopping_admin": wa.get("SHOPPING_ADMIN"),
                    "reddit": wa.get("REDDIT"), "gitlab": wa.get("GITLAB"), "wikipedia": wa.get("WIKIPEDIA"),
                    "map": wa.get("MAP"), "homepage": wa.get("HOMEPAGE"),
                    "full_reset": reset_server_url(Lab(instance=inst["instance"]))})
    return out


def values(lab: Lab, fmt: str, benchmark: str = "webarena") -> dict[str, str]:
    return browsergym(lab) if fmt == "browsergym" else lab.env(benchmark)


def format_env(lab: Lab, fmt: str, benchmark: str = "webarena") -> str:
    if fmt == "json":
        return json.dumps(env_json(lab), indent=2) + "\n"
    if fmt == "agentlab":
        return json.dumps(agentlab(), indent=2) + "\n"
    out = values(lab, fmt, benchmark)
    if fmt == "dotenv":
        return "".join(f"{k}={v}\n" for k, v in out.items())
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in out.items())
