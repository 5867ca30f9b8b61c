"""The one place that runs Ansible: playbooks through ansible-runner, over SSH, on many hosts.

The inventory is generated from :class:`InventoryHost` records (EC2 instances or test hosts) or
is the user's own file. Hosts run in parallel (forks); ansible-runner's event stream drives a
progress callback and is also where results are read: a failed or unreachable host is reported
as a :class:`HostFailure` (host, task, output) while the play continues on the others, and the
output of tasks named ``collect: …`` is gathered per host (for a task with a loop: one record per
item, with its ``item``, ``rc``, parsed ``value`` and last ``stderr`` line).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import ansible_runner

from envctl.errors import PlaybookFailed, UsageError

COLLECT_PREFIX = "collect: "


@dataclass(frozen=True)
class InventoryHost:
    name: str  # inventory hostname, e.g. the instance id
    address: str  # what SSH connects to
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    become: bool = False
    vars: Mapping[str, Any] = field(default_factory=dict)  # e.g. envctl_instance, envctl_port_offset, envctl_public_host


@dataclass(frozen=True)
class PlayEvent:
    """One step of progress: ``kind`` is task | ok | changed | skipped | failed | unreachable."""

    kind: str
    host: str | None
    task: str


@dataclass(frozen=True)
class HostFailure:
    host: str
    task: str
    output: str
    unreachable: bool = False  # SSH could not reach the host (vs. a task that failed there)

    def line(self) -> str:
        return f"{self.host}: task '{self.task}' failed: {self.output}"


@dataclass
class PlayResult:
    status: str  # ansible-runner status: successful | failed | timeout | canceled
    rc: int
    hosts: list[str]
    failures: list[HostFailure]
    changed: dict[str, list[str]]  # host -> names of the tasks that changed something
    collected: dict[str, dict[str, Any]]  # host -> collect name -> parsed stdout (JSON when it parses)
    seconds: float

    @property
    def ok_hosts(self) -> list[str]:
        bad = {f.host for f in self.failures}
        return [h for h in self.hosts if h not in bad]

    def raise_if_all_failed(self) -> None:
        if self.hosts and not self.ok_hosts:
            raise PlaybookFailed("the playbook failed on every host: " + " | ".join(f.line() for f in self.failures),
                                 "fix the first failure and run 'envctl cloud up' again (it is idempotent)")


def playbook_path(name: str) -> Path:
    path = Path(str(resources.files("envctl").joinpath("playbooks", name)))
    if not path.is_file():
        raise UsageError(f"no playbook named {name}", f"available: {', '.join(p.name for p in path.parent.glob('*.yml'))}")
    return path


def inventory(hosts: Sequence[InventoryHost], *, known_hosts: Path | None = None) -> dict[str, Any]:
    """An Ansible inventory (dict form) with every host in the group ``envctl``."""
    ssh_args = ["-o StrictHostKeyChecking=accept-new", "-o ServerAliveInterval=15", "-o ConnectTimeout=20"]
    if known_hosts:
        ssh_args.append(f"-o UserKnownHostsFile={known_hosts}")
    out: dict[str, Any] = {}
    for h in hosts:
        v = {"ansible_host": h.address, "ansible_port": h.port, "ansible_user": h.user,
             "ansible_ssh_common_args": " ".join(ssh_args), "ansible_python_interpreter": "auto_silent", **h.vars}
        if h.key_file:
            v["ansible_ssh_private_key_file"] = h.key_file
        if h.become:
            v["ansible_become"] = True
        out[h.name] = v
    return {"all": {"children": {"envctl": {"hosts": out}}}}


def _ansible_bin() -> Path:
    """The bin/ of this Python's environment (ansible-playbook and ansible-inventory come with envctl's extra)."""
    return Path(sys.executable).parent


def inventory_hosts(path: Path, group: str = "envctl") -> dict[str, dict[str, Any]]:
    """The hosts of ``group`` in the user's inventory file and each one's variables (ansible-inventory reads it: INI,
    YAML, any plugin). One line of error for a file Ansible cannot read or without the group."""
    if not path.is_file():
        raise UsageError(f"inventory file {path} does not exist", "give the path of an Ansible inventory (INI or YAML)")
    env_path = os.pathsep.join([str(_ansible_bin()), os.environ.get("PATH", "")])
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = env_path  # ansible-runner looks ansible-inventory up on PATH
    try:
        out, err = ansible_runner.get_inventory("list", [str(path)], response_format="json", quiet=True)
    except Exception as exc:  # noqa: BLE001 - ansible-runner raises several kinds for an unreadable file
        raise UsageError(f"inventory file {path} could not be read by Ansible: {exc}", "check its syntax "
                         "(ansible-inventory -i FILE --list)") from None
    finally:
        os.environ["PATH"] = old
    if not isinstance(out, dict):
        last = (str(err or out).strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"inventory file {path} could not be read by Ansible: {last}",
                         "check its syntax (ansible-inventory -i FILE --list)")
    names = list((out.get(group) or {}).get("hosts") or [])
    if not names:
        raise UsageError(f"inventory file {path} has no machines in the group '{group}'",
                         f"list the lab's machines under [{group}] (INI) or {group}: hosts: (YAML)")
    hostvars = (out.get("_meta") or {}).get("hostvars") or {}
    return {n: dict(hostvars.get(n) or {}) for n in names}


def _parse(out: str) -> Any:
    try:
        return json.loads(out)
    except ValueError:
        return out


def _collect(res: Mapping[str, Any]) -> Any:
    if isinstance(res.get("results"), list):  # a loop: one record per item that ran
        return [{"item": r.get("item"), "rc": r.get("rc"), "value": _parse(str(r.get("stdout", ""))),
                 "stderr": (str(r.get("stderr", "")).strip().splitlines() or [""])[-1]}
                for r in res["results"] if isinstance(r, dict) and not r.get("skipped")]
    return _parse(str(res.get("stdout", "")))


def _output(res: Mapping[str, Any]) -> str:
    if isinstance(res.get("results"), list):  # a loop: the items that failed
        bad = [r for r in res["results"] if isinstance(r, dict) and r.get("failed")]
        if bad:
            return " || ".join(f"{r.get('item')}: {_output(r)}" for r in bad)[-800:]
    parts = [str(res.get(k, "")).strip() for k in ("msg", "stderr", "stdout") if res.get(k)]
    text = " | ".join(p for p in parts if p) or json.dumps(res)[:400]
    return text[-800:]


def run_playbook(
    playbook: str,
    inventory_source: Mapping[str, Any] | Path,
    *,
    extravars: Mapping[str, Any] | None = None,
    progress: Callable[[PlayEvent], None] | None = None,
    forks: int = 20,
    timeout: int | None = None,
    limit: str | None = None,
) -> PlayResult:
    """Run ``envctl/playbooks/<playbook>`` on the inventory; never raises for a failed host."""
    if isinstance(inventory_source, Path) and not inventory_source.is_file():
        raise UsageError(f"inventory file {inventory_source} does not exist")
    book = playbook_path(playbook)
    failures: list[HostFailure] = []
    changed: dict[str, list[str]] = {}
    collected: dict[str, dict[str, Any]] = {}
    hosts: set[str] = set()

    def on_event(ev: dict[str, Any]) -> bool:
        kind, data = ev.get("event", ""), ev.get("event_data", {})
        host, task = data.get("host"), str(data.get("task", "")).strip()
        res = data.get("res") or {}
        if host:
            hosts.add(host)
        shown: str | None = None
        if kind == "playbook_on_task_start":
            shown = "task"
        elif kind == "runner_on_ok":
            shown = "changed" if res.get("changed") else "ok"
            if res.get("changed"):
                changed.setdefault(host, []).append(task)
            if task.startswith(COLLECT_PREFIX):
                collected.setdefault(host, {})[task[len(COLLECT_PREFIX):]] = _collect(res)
        elif kind == "runner_on_skipped":
            shown = "skipped"
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            shown = "failed"
            failures.append(HostFailure(host, task, _output(res)))
        elif kind == "runner_on_unreachable":
            shown = "unreachable"
            failures.append(HostFailure(host, task or "connect", _output(res), unreachable=True))
        if shown and progress:
            progress(PlayEvent(shown, host, task))
        return False  # nothing needs keeping on disk beyond what ansible-runner writes anyway

    # ansible-playbook of the same environment as this Python, even when its bin/ is not on PATH
    binary = _ansible_bin() / "ansible-playbook"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="envctl-ansible-") as tmp:
        inv: Any = str(inventory_source) if isinstance(inventory_source, Path) else dict(inventory_source)
        runner = ansible_runner.run(
            private_data_dir=tmp, project_dir=str(book.parent), playbook=book.name, inventory=inv,
            extravars=dict(extravars or {}), forks=forks, quiet=True, event_handler=on_event, limit=limit,
            timeout=timeout,
            envvars={"PATH": os.pathsep.join([str(binary.parent), os.environ.get("PATH", "")]), "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
                     "ANSIBLE_PIPELINING": "1", "ANSIBLE_SSH_RETRIES": "3"},
            settings={"suppress_ansible_output": True},
        )
        stats = runner.stats or {}
        tail = ""
        if runner.status != "successful" and not failures:
            try:
                tail = " | ".join(runner.stdout.read().strip().splitlines()[-6:])
            except (OSError, ValueError, AttributeError):
                tail = ""
    for group in ("ok", "failures", "dark", "skipped", "changed"):
        hosts.update((stats.get(group) or {}).keys())
    if runner.status in ("timeout", "canceled") or (runner.rc and not failures):
        failures.append(HostFailure("*", "ansible-playbook", f"status {runner.status}, rc {runner.rc}: {tail}"[-800:]))
    return PlayResult(str(runner.status), int(runner.rc or 0), sorted(hosts), failures, changed, collected,
                      time.monotonic() - started)
