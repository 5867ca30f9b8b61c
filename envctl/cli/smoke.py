"""envctl smoke: the reference agent and the benchmarks' evaluators."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from envctl.cli.core import (Ctx, exit_unless, cli, instance_option, json_option, pass_ctx)


# -- smoke suite -----------------------------------------------------------------------------------
@cli.command()
@click.option("--tasks", "task_set", default="mini", show_default=True,
              help="bundled set (mini, webarena-smoke, webarena-verified) or a task-set JSON file "
                   "(WebArena's or webarena-verified's format)")
@click.option("--sites", default=None, help="comma-separated sites to test [every site that is up]")
@click.option("--agent", type=click.Choice(["reference", "llm"]), default="reference", show_default=True)
@instance_option
@click.option("--report", "report_dir", default="reports/smoke", show_default=True, help="JSON + HTML report folder")
@click.option("--parallel", type=click.IntRange(1, 8), default=3, show_default=True, help="site groups run at once")
@json_option
@pass_ctx
def smoke(ctx: Ctx, task_set: str, sites: str | None, agent: str, instance: str, report_dir: str, parallel: int,
          as_json: bool) -> None:
    """Run the reference agent through benchmark-format tasks and score them with the benchmark's evaluators."""
    from envctl.errors import need_extra
    from envctl.render import emit_json, err_console
    from envctl.smoke import format_table

    need_extra("browser", "envctl smoke", "playwright")

    def progress(r: Any) -> None:
        if not as_json:
            err_console.print(f"{r.status:>4}  {','.join(r.sites):<22} {r.task_id}  {r.elapsed_s:.1f}s  {r.reason[:70]}")

    result = ctx.lab(instance).smoke(task_set, sites=sites.split(",") if sites else None, agent=agent,
                                     report_dir=report_dir, parallel=parallel, progress=progress,
                                     announce=(lambda m: None) if as_json else err_console.print)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(format_table(result))
        click.echo(f"report: {Path(report_dir) / 'report.html'}")
    exit_unless(result.ok)


