"""Login failures, one class per cause a user fixes differently.

All are :class:`envctl.errors.LoginFailed`; ``site`` names the site and ``kind`` is a short tag
used in reports and ``--json`` output (``down``, ``credentials``, ``page-changed``, ``rejected``).
"""
from __future__ import annotations

from envctl.errors import LoginFailed


class AuthError(LoginFailed):
    kind = "error"

    def __init__(self, site: str, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.site = site


class SiteDown(AuthError):
    """The site does not answer, or its health probes fail: no login was tried."""

    kind = "down"


class WrongCredentials(AuthError):
    """The site refused the account; the message carries the site's own error text."""

    kind = "credentials"


class LoginPageChanged(AuthError):
    """A login field the catalog describes is not on the page."""

    kind = "page-changed"


class StateRejected(AuthError):
    """The saved state does not pass the site's expiry probe in a fresh browser context."""

    kind = "rejected"
