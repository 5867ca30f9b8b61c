"""envctl tasks: the benchmarks' tasks as envctl sees them (read or write: who may share an instance)."""
from __future__ import annotations

from typing import Any

import click

from envctl.cli.core import Ctx, cli, json_option, pass_ctx
from envctl.errors import UsageError

BENCHMARKS = ("webarena", "visualwebarena", "webarena-verified")  # envctl.smoke.classify.BENCHMARKS (checked by a test)


@cli.group()
def tasks() -> None:
    """The benchmarks' tasks: which only read a site and which write it."""


def _read_only(ctx: Ctx, sites: list[str]) -> list[str]:
    """The sites the catalog cannot reset because nothing writes them (reset tier ``none``)."""
    return [s for s in sites if s in ctx.catalog.sites and ctx.catalog.site(s).reset.tier == "none"]


def _print(doc: dict[str, Any], read_only: list[str]) -> None:
    from envctl.render import console, table

    table(f"{doc['benchmark']}: {doc['source']}", ["task", "access", "reason", "sites"],
          [[t["task_id"], t["access"], t["reason"], ",".join(t["sites"])] for t in doc["tasks"]])
    summary = doc["summary"]
    rows = [[site, c["read"], c["write"], c["tasks"]] for site, c in summary["sites"].items()]
    rows.append(["all", summary["all"]["read"], summary["all"]["write"], summary["all"]["tasks"]])
    table("per site", ["site", "read", "write", "tasks"], rows)
    console.print("a task counts under every site it names; 'all' counts it once", markup=False, highlight=False)
    for rule, e in summary["exceptions"].items():
        n = e["count"]
        console.print(f"{rule}: {n} {e['access']}{'s' if n != 1 else ''} ({e['why']}): {', '.join(e['task_ids'])}",
                      markup=False, highlight=False)
    for site in read_only:
        n = summary["sites"][site]["write"]
        if n:
            console.print(f"{site} is read-only (reset tier none): its {n} write tasks write another site they name",
                          markup=False, highlight=False)


@tasks.command("classify")
@click.option("--benchmark", default=None, type=click.Choice(BENCHMARKS),
              help="whose tasks: WebArena's and VisualWebArena's come from their pinned PyPI wheels (fetched with "
                   "pip into ~/.cache/envctl/tasks), webarena-verified's from its installed package")
@click.option("--file", "file", default=None, metavar="PATH", type=click.Path(exists=True, dir_okay=False),
              help="classify this task file instead (a JSON list of WebArena-format task configs, or an object with "
                   "a 'tasks' list)")
@json_option
@pass_ctx
def tasks_classify(ctx: Ctx, benchmark: str | None, file: str | None, as_json: bool) -> None:
    """Each task read (it only reads a site's state) or write (it changes state a later task could see), with the
    field that decided it, and the counts per site."""
    from envctl.render import emit_json
    from envctl.smoke.classify import classify_benchmark

    if benchmark is None:  # not click's required=True: its message for a missing choice takes four lines
        raise UsageError("--benchmark is missing", f"choose one of {', '.join(BENCHMARKS)}")

    doc = classify_benchmark(benchmark, file)
    read_only = _read_only(ctx, list(doc["summary"]["sites"]))
    if as_json:
        emit_json({**doc, "summary": {**doc["summary"], "read_only_sites": read_only}})
    else:
        _print(doc, read_only)
