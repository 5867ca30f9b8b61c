"""Child processes a test stops with a signal, started with SIGINT and SIGTERM at their defaults.

A shell starts a background job (``nohup make test &``, a CI runner that backgrounds its steps) with
SIGINT ignored, and an ignored signal stays ignored across ``exec``: a Python child then installs no
KeyboardInterrupt handler, so the test's Ctrl-C (SIGINT) does nothing and the child runs to completion
(issue #32). Pass :func:`signals_default` as ``preexec_fn`` to every child a test interrupts."""
from __future__ import annotations

import signal


def signals_default() -> None:
    """``preexec_fn``: SIGINT and SIGTERM back to their default dispositions in the child, before ``exec``."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
