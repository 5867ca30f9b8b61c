"""Masking secrets in what envctl shows: structured data by key, free text by known values.

- :func:`mask_data` walks dicts and lists and replaces the value of every password-like key
  (``password``, ``passwd``, ``secret``, ``token``, ``api_key``…, and env vars such as
  ``MYSQL_ROOT_PASSWORD``) with ``***``. It never serialises and re-parses, so a secret that
  happens to be ``"`` or ``a`` cannot break or garble the output. Use it for ``--json`` output
  (``envctl sites show --json``) and anything else that is data before it is text.
- :func:`mask_text` replaces a site's known secret values (account passwords, the settings named
  in ``secrets:``, password-like service env values) in free text such as logs and command lines.
  Values shorter than :data:`MIN_SECRET` characters are skipped: replacing ``""`` or ``"a"``
  everywhere would garble the text and hide nothing worth hiding; values are replaced only where
  they stand alone, not inside longer words.

This module is ``envctl.secrets``; the standard library's ``secrets`` is unaffected (absolute imports).
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Protocol, Sequence


class _Account(Protocol):
    @property
    def password(self) -> str: ...


class SiteSecrets(Protocol):
    """What masking needs of a catalog ``Site`` (kept structural: this module sits below the catalog)."""

    @property
    def accounts(self) -> Sequence[_Account]: ...
    @property
    def secrets(self) -> Sequence[str]: ...
    @property
    def settings(self) -> Mapping[str, str]: ...

MASK = "***"
MIN_SECRET = 3
_SECRET_WORDS = ("password", "passwd", "passphrase", "secret", "token", "credential")
# "key" alone is too common (expect_json_key, keyword, monkey): only these names count
_KEY_NAMES = re.compile(r"^key$|(^|[_.-])(api[_-]?key|private[_-]?key|access[_-]?key|secret[_-]?key|auth[_-]?key|"
                        r"ssh[_-]?key|signing[_-]?key|encryption[_-]?key|key[_-]?material)$")
_PWD = re.compile(r"(^|[_.-])(pwd|pass)$")
# mysql-style inline passwords: -pSECRET, --password=SECRET
_INLINE = re.compile(r"(?<![\w-])(-p|--password=)([^\s\"',]{2,})")
# NAME=value / NAME: value where NAME is password-like (env vars in logs, docker inspect, argv)
_ASSIGNED = re.compile(r"((?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)[\"']?(?:=|: ?)[\"']?)(?![\s\"']|\*\*\*)([^\s\"',;&]+)")
# the catalog's `secrets:` is a list of setting *names*, not values
NAME_LISTS = frozenset({"secrets"})


def is_secret_key(name: object) -> bool:
    """True for keys whose value is a secret: ``password``, ``db_passwd``, ``reset_token``,
    ``client_secret``, ``api_key``, ``KeyMaterial``, ``MYSQL_ROOT_PASSWORD``, ``GITLAB_TOKEN``…"""
    if not isinstance(name, str):
        return False
    # camelCase -> snake_case, so apiKey / KeyMaterial are seen as api_key / key_material
    low = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    return any(w in low for w in _SECRET_WORDS) or bool(_KEY_NAMES.search(low) or _PWD.search(low))


def mask_data(obj: Any, *, keys: Iterable[str] = (), site: "SiteSecrets | None" = None) -> Any:
    """A copy of ``obj`` (dicts, lists, tuples, scalars) with every password-like key's value masked.

    ``keys`` adds exact key names to mask (e.g. a site's ``secrets:`` setting names). With
    ``site``, its ``secrets:`` names are added and every string is also passed through
    :func:`mask_text` (so ``mysql -ppassword`` inside a command line is masked too). Values that
    are dicts or lists are walked, not masked whole (``login.password`` describes a form field);
    ``None`` and booleans are left as they are."""
    extra = set(keys) | (set(site.secrets) if site is not None else set())

    def masked(value: Any) -> Any:
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, (str, int, float, bytes)):
            return MASK
        return walk(value, True)

    def walk(value: Any, secret: bool = False) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k in NAME_LISTS and isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
                    out[k] = list(v) if isinstance(v, list) else tuple(v)
                elif is_secret_key(k) or k in extra:
                    out[k] = masked(v)
                else:
                    out[k] = walk(v)
            return out
        if isinstance(value, (list, tuple)):
            items = [masked(v) if secret else walk(v) for v in value]
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, str) and site is not None:
            return mask_text(site, value)
        return value

    return walk(obj)


def site_secret_values(site: "SiteSecrets") -> list[str]:
    """The site's secret values worth masking in text: account passwords and the settings named in
    ``secrets:``; longest first, shorter than :data:`MIN_SECRET` dropped. (Service env values such
    as ``MYSQL_ROOT_PASSWORD: password`` are often common words; text masks them by their
    ``NAME=value`` form instead, see :func:`mask_secrets`.)"""
    values: set[str] = {a.password for a in site.accounts if isinstance(a.password, str)}
    values |= {site.settings[k] for k in site.secrets if isinstance(site.settings.get(k), str)}
    return sorted((v for v in values if len(v) >= MIN_SECRET), key=lambda v: (-len(v), v))


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` (at least :data:`MIN_SECRET` characters) replaced by ``***``,
    longest first, in one pass (a replacement is never re-scanned). A secret is only replaced where
    it stands alone (not inside a longer word). Whatever the value, ``-pSECRET``,
    ``--password=SECRET`` and ``NAME=SECRET`` / ``NAME: SECRET`` with a password-like NAME
    (``MYSQL_ROOT_PASSWORD=…``) are masked too."""
    usable = sorted({s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET}, key=lambda v: (-len(v), v))
    if usable:
        text = re.sub(r"(?<![A-Za-z0-9_])(?:" + "|".join(re.escape(s) for s in usable) + r")(?![A-Za-z0-9_])", MASK, text)
    text = _ASSIGNED.sub(lambda m: m.group(1) + MASK if is_secret_key(m.group(2)) else m.group(0), text)
    return _INLINE.sub(rf"\1{MASK}", text)


def mask_text(site: "SiteSecrets", text: str) -> str:
    """Hide the site's passwords and secret settings in text meant for humans or logs (a drop-in
    for ``envctl.instance.Instance.mask``)."""
    return mask_secrets(text, site_secret_values(site))


__all__ = ["MASK", "MIN_SECRET", "is_secret_key", "mask_data", "mask_secrets", "mask_text", "site_secret_values"]
