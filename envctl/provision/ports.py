"""Who holds a host port: checked before ``up`` creates anything."""
from __future__ import annotations

import socket
import subprocess

from envctl.errors import EnvctlError
from envctl.provision import docker as dk


def port_bindable(bind: str, port: int) -> bool:
    """Whether a server could listen on ``bind:port`` now."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind, port))
            return True
        except OSError:
            return False


def port_holder(port: int) -> str:
    """Name what holds a port: an envctl instance, another container, or a process."""
    for c in dk.containers():
        got = dk.seen(c)  # None: removed by another process since the listing
        if got and got[2] == "running" and str(port) in got[1].get("envctl.ports", "").split(","):
            return f"envctl instance '{got[1].get('envctl.instance', '')}' (container {got[0]})"
    try:
        names = dk.publishers(port)
        if names:
            return f"container '{names[0]}'"
    except EnvctlError:
        pass
    try:
        # every TCP state, not only listeners: a connected client's own end holds a port too
        out = subprocess.run(["ss", "-Htanp", f"sport = :{port}"], capture_output=True, text=True, timeout=5).stdout
        if 'users:(("' in out:
            proc = out.split('users:(("', 1)[1].split('"', 1)[0]
            pid = out.split("pid=", 1)[1].split(",", 1)[0] if "pid=" in out else "?"
            return f"process '{proc}' (pid {pid})"
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return "another process"
