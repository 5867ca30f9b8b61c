"""Render an instance's URLs in the shapes harnesses read.

- ``shell`` / ``dotenv``: WebArena (or VisualWebArena) names, no trailing slashes;
- ``json``: both benchmarks' names plus per-site URLs;
- ``browsergym``: ``WA_*`` and ``VWA_*`` copies, and ``WA_FULL_RESET`` / ``VWA_FULL_RESET`` when a
  reset server (``envctl serve``) runs for the instance; when that server requires a token, the URL
  carries it as its last path segment (``http://host:7565/<token>``: BrowserGym appends ``/reset``
  and ``/status``), so treat these values as secrets;
- ``agentlab``: a JSON list, one entry per running instance, with AgentLab's lower-case fields;
- ``webarena-verified``: webarena-verified's environment config (:func:`envctl.smoke.verified.config`), the
  file its CLI (``--config``) and Python API (``WebArenaVerified(config=Path(...))``) read; written 0600
  (it holds the benchmark accounts) to ``<auth dir>/webarena-verified.json`` or ``--out``, its path printed;
  ``--out -`` prints the config itself.

Header login (:mod:`envctl.auth.headers`): asked for (``header_login=True``, ``env --header-login``) and
where a site up logs in by header on the instance's flavor, ``browsergym`` adds ``PW_EXTRA_HEADERS``, the
path of ``<auth dir>/extra_headers.json`` (0600, written or refreshed here from the catalog: it holds the
accounts' passwords), the file BrowserGym and libwebarena load. Not by default: BrowserGym 0.14.3 still
runs its form login after applying the headers, and on a site the headers already logged in that login
waits for a "Log in" link that is not there (its ``reset`` times out); libwebarena 0.0.5's REST helpers
expect an ``Authorization`` entry in the file. Harnesses that log in by header alone want it.
"""
from __future__ import annotations

import json
import shlex
from typing import Any

from pathlib import Path

import envctl.auth.headers as login_headers
from envctl.auth.files import write_private
from envctl.errors import EnvctlError
from envctl.lab import Lab
from envctl.paths import output_file
from envctl.serve import running_server_url
from envctl.smoke.verified import config as verified_config


def reset_server_url(lab: Lab) -> str | None:
    return running_server_url(lab.instance)


def env_json(lab: Lab) -> dict[str, Any]:
    settings = lab.settings()
    return {"instance": lab.instance, "running": settings is not None, "sites_up": lab.sites_up() if settings else [],
            "webarena": lab.env("webarena"), "visualwebarena": lab.env("visualwebarena"),
            "full_reset": reset_server_url(lab)}


def browsergym(lab: Lab, header_login: bool = False) -> dict[str, str]:
    out = {f"WA_{k}": v for k, v in lab.env("webarena").items()}
    out.update({f"VWA_{k}": v for k, v in lab.env("visualwebarena").items() if k != "DATASET"})
    reset = reset_server_url(lab)
    if reset:
        out["WA_FULL_RESET"] = reset
        out["VWA_FULL_RESET"] = reset
    headers = extra_headers(lab) if header_login else None
    if headers is not None:
        out["PW_EXTRA_HEADERS"] = str(headers.resolve())
    return out


def extra_headers(lab: Lab) -> Path | None:
    """The headers file of the sites up that log in by header on the instance's flavor (written or refreshed,
    0600), or None when none does."""
    settings = lab.settings()
    if settings is None:
        return None
    sites = lab.sites_up()
    if not login_headers.render(lab.catalog, sites, settings.flavor):
        return None
    return login_headers.write(lab.auth_dir, lab.catalog, sites, settings.flavor)


def webarena_verified(lab: Lab, *, credentials: bool = True) -> dict[str, Any]:
    """webarena-verified's environment config for the instance (every site of its flavor, as the other formats)."""
    settings = lab.settings()
    if settings is None:
        return {"environments": {}}
    return verified_config(lab.catalog, lab.env("webarena"), settings.flavor, credentials=credentials)


def write_webarena_verified(lab: Lab, out: str | None) -> Path:
    """Write the config (0600, atomically) to ``out`` or ``<auth dir>/webarena-verified.json``; its path."""
    path = output_file(out, "--out") if out else Path(lab.auth_dir) / "webarena-verified.json"
    try:
        write_private(path, webarena_verified(lab))
    except OSError as exc:
        raise EnvctlError(f"cannot write {path} ({exc.strerror})", "give --out a file path you can write") from None
    return path


def agentlab(catalog: Any = None) -> list[dict[str, Any]]:
    """One entry per running instance; a key per WebArena site (the catalog's names), its URL as the
    site's WebArena variable gives it."""
    out = []
    for inst in Lab.instances(catalog):
        lab = Lab(catalog, instance=inst.instance)
        entry: dict[str, Any] = {"instance": inst.instance}
        for name, site in lab.catalog.sites.items():
            names = list(site.env.get("webarena", {}))
            if names:
                entry[name] = inst.webarena.get(names[0])
        entry["full_reset"] = reset_server_url(lab)
        out.append(entry)
    return out


def values(lab: Lab, fmt: str, benchmark: str = "webarena", header_login: bool = False) -> dict[str, str]:
    """The flat variables of ``shell``/``dotenv``/``browsergym``."""
    return browsergym(lab, header_login) if fmt == "browsergym" else lab.env(benchmark)


def format_env(lab: Lab, fmt: str, benchmark: str = "webarena", header_login: bool = False) -> str:
    if fmt == "json":
        return json.dumps(env_json(lab), indent=2) + "\n"
    if fmt == "agentlab":
        return json.dumps(agentlab(lab.catalog), indent=2) + "\n"
    out = values(lab, fmt, benchmark, header_login)
    if fmt == "dotenv":
        return "".join(f"{k}={v}\n" for k, v in out.items())
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in out.items())
